# patchbake — the two commands a fresh machine needs are `make demo` and `make test`.
PY ?= python3
PIP ?= $(PY) -m pip
export PATCHBAKE_NO_PROGRESS ?=

.PHONY: setup setup-python setup-suite setup-system services demo test unit integration bench lint check clean reliability guard ci-gates

setup: setup-system setup-python

setup-system:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; \
	  command -v dockerd >/dev/null || missing="$$missing docker.io"; \
	  command -v docker-registry >/dev/null || missing="$$missing docker-registry"; \
	  command -v busybox >/dev/null || missing="$$missing busybox-static"; \
	  command -v curl >/dev/null || missing="$$missing curl"; \
	  command -v umoci >/dev/null || missing="$$missing umoci"; \
	  command -v chromium >/dev/null || missing="$$missing chromium"; \
	  if [ -n "$$missing" ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  fi; \
	else echo "not root or no apt-get: install docker.io, docker-registry, busybox-static, umoci, chromium yourself"; fi

setup-python:
	$(PIP) install -q -e '.[test]'

# The payload's fixture suite needs torch; its CPU part runs in CI. 2.13.0 is the CPU
# build this machine kind keeps on disk (any torch already installed is kept).
TORCH_SPEC ?= torch==2.13.0
setup-suite:
	@$(PY) -c 'import torch' 2>/dev/null || $(PIP) install -q '$(TORCH_SPEC)'

services: setup-system
	./ci/services.sh

# The main job, end to end on the embedded defaults.
demo: setup-python
	$(PY) -m patchbake run

# The test suite: unit (hermetic) and integration (real git, sdist, engine, registry).
# pytest exits 5 when nothing is collected: that is a failure here, never a pass.
test: setup setup-suite services
	$(PY) -m pytest -q tests; rc=$$?; \
	  if [ $$rc = 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

unit: setup-python
	$(PY) -m pytest -q tests/unit

bench: setup services
	PYTHONPATH=tools $(PY) bench/run.py

# Hostile inputs, a fault proxy before the real registry, seeded kill -9/SIGTERM trials and
# 4-way concurrency (loopback only, ~20 min on 2 cores); writes docs/RELIABILITY.md.
reliability: setup services
	PYTHONPATH=tools $(PY) tests/reliability/run.py

# The lost-line guard with only Python and git (patch <=> FILES.txt; the pull-request gate).
guard:
	$(PY) tools/check_patch_files.py

# Every channel's release gates for the offline image (ci/gates.sh; CI runs the same).
ci-gates:
	PY=$(PY) ./ci/gates.sh

lint:
	$(PIP) install -q -e '.[lint]'
	ruff check tools tests bench
	mypy tools/patchbake

clean:
	rm -rf build dist *.egg-info .pytest_cache
