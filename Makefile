# patchbake — the two commands a fresh machine needs are `make demo` and `make test`.
#
# Python: an active virtual environment ($VIRTUAL_ENV) is used as it is; otherwise the
# Makefile makes its own in .venv/ with the python3 it finds (PYTHON=...), so a stock
# Debian /usr/bin/python3 (externally managed, PEP 668) works unchanged.
PYTHON ?= python3
VENV ?= .venv
ifdef VIRTUAL_ENV
PY ?= $(VIRTUAL_ENV)/bin/python
VENV_STAMP :=
else
PY ?= $(VENV)/bin/python
VENV_STAMP := $(VENV)/.made
endif
PIP ?= $(PY) -m pip
VENV_BIN = $(dir $(PY))
APT_GET = DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600
export PATCHBAKE_NO_PROGRESS ?=

.PHONY: help setup setup-python setup-suite setup-system setup-bench services services-stop demo \
        test unit integration bench lint dist check clean venv reliability guard ci-gates ci-local \
        sm89-compile-evidence serving-image

# `make` alone explains itself: several targets install packages as root.
.DEFAULT_GOAL := help
help:
	@echo "patchbake: make TARGET (README.md says more)"
	@echo "  demo            .venv/ + the tool, then \`patchbake run\` (the main job end to end)"
	@echo "  test            as root: Debian packages, torch CPU, engine + registry, then all tests"
	@echo "  unit            the hermetic unit tests"
	@echo "  setup-python    .venv/ with the tool and its test packages"
	@echo "  setup-suite     torch (CPU build) and numpy for the payload's fixture suite"
	@echo "  setup-system    as root: the Debian packages the tests use (apt-get)"
	@echo "  services        as root: start a Docker engine and a registry on 127.0.0.1:5000"
	@echo "  services-stop   stop what \`make services\` started"
	@echo "  lint            ruff, mypy (strict), import-linter"
	@echo "  dist            sdist + wheel, checked by twine"
	@echo "  bench           benchmarks (bench/RESULTS.md)"
	@echo "  reliability     hostile inputs, faults, crash trials"
	@echo "  guard           the lost-line guard with only Python and git"
	@echo "  ci-gates        every channel's release gates for the offline image"
	@echo "  ci-local        run .github/workflows/release.yml here (CHANNEL=..., WORKFLOW=...)"
	@echo "  clean           remove build outputs"

setup: setup-system setup-python

# Debian packages the tests use (root + apt only); waits for another apt's dpkg lock.
# umoci: the tar differential test's second unpacker; chromium: the release report's test;
# mmdebstrap: the serving base's Debian root filesystem (`patchbake lock`, `image base`).
SYSTEM_PACKAGES = dockerd:docker.io docker-registry:docker-registry busybox:busybox-static \
                  curl:curl umoci:umoci chromium:chromium mmdebstrap:mmdebstrap
setup-system:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; \
	  for pair in $(SYSTEM_PACKAGES); do \
	    command -v "$${pair%%:*}" >/dev/null || missing="$$missing $${pair#*:}"; \
	  done; \
	  $(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	  if [ -n "$$missing" ]; then \
	    echo "apt-get install:$$missing"; \
	    $(APT_GET) update -qq && \
	    $(APT_GET) install -y -qq --no-install-recommends $$missing >/dev/null; \
	  fi; \
	else echo "not root or no apt-get: install docker.io, docker-registry, busybox-static, curl, umoci, chromium, mmdebstrap and python3-venv yourself"; fi

# The benchmark's anchors also need skopeo.
setup-bench:
	@$(MAKE) --no-print-directory setup-system SYSTEM_PACKAGES="$(SYSTEM_PACKAGES) skopeo:skopeo"

venv: $(VENV_STAMP)
$(VENV)/.made:
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  echo "$(PYTHON) cannot make a virtual environment: install Debian's python3-venv" \
	       "(as root: make setup-system), or activate a virtual environment first"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	@# pip >= 25 reads Metadata 2.4 (License-Expression: `pip show` names the license)
	$(VENV)/bin/python -m pip install -q --upgrade 'pip>=25'
	@touch $@

setup-python: $(VENV_STAMP)
	$(PIP) install -q -e '.[test]'

# The payload's fixture suite needs torch (CPU build) and numpy; its CPU part runs in CI.
# torch comes from the index pip is configured with; to take CPU wheels from another index,
# put it in pip's configuration (`pip config set patchbake.torch-index-url URL`, read here)
# or pass TORCH_INDEX=URL. 2.13.0 is the CPU build this machine kind keeps on disk.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= $(shell $(PIP) config get patchbake.torch-index-url 2>/dev/null)
setup-suite: $(VENV_STAMP)
	@$(PY) -c 'import torch' 2>/dev/null || { \
	  echo "installing $(TORCH_SPEC) (CPU build, about 200 MB; progress below)"; \
	  $(PIP) install --progress-bar on $(if $(TORCH_INDEX),--extra-index-url '$(TORCH_INDEX)') \
	    '$(TORCH_SPEC)'; }
	$(PIP) install -q -e '.[suite]'

# A Docker engine (no bridge network) and a registry on 127.0.0.1:5000; their state, logs and
# pid files live in $PATCHBAKE_SERVICES_DIR (default /var/tmp/patchbake-services).
services: setup-system
	./ci/services.sh

services-stop:
	./ci/services.sh stop

# The main job, end to end on the embedded defaults.
demo: setup-python
	$(PY) -m patchbake run

# The test suite: unit (hermetic) and integration (real git, sdist, engine, registry), on
# TEST_WORKERS processes (pytest-xdist; auto: one per core; 0: one process). A test module
# runs whole on one worker, modules sharing machine state together, slow ones first
# (tests/conftest.py). pytest exits 5 when nothing is collected: a failure here, never a pass.
TEST_WORKERS ?= auto
test: setup setup-suite services
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests; rc=$$?; \
	  if [ $$rc = 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

unit: setup-python
	$(PY) -m pytest -q tests/unit

# The real sm89 serving image (README, docs/images.md): the lineage's committed lock -> the
# serving base (downloads about 5 GB of wheels and 130 Debian packages the first time) ->
# the patch baked on it -> loaded into the engine. Prints the digests.
SERVING_IMAGE ?= sm89-serving-local
SERVING_LINEAGE ?= v0.25.1
serving-image: setup-python
	$(PY) -m patchbake image base --lineage $(SERVING_LINEAGE)
	$(PY) -m patchbake --lineage $(SERVING_LINEAGE) bake $(SERVING_IMAGE)
	$(PY) -m patchbake image load $(SERVING_IMAGE)

bench: setup setup-bench services
	PYTHONPATH=tools $(PY) bench/run.py

# Hostile inputs, a fault proxy before the real registry, seeded kill -9/SIGTERM trials and
# 4-way concurrency (loopback only, ~20 min on 2 cores); writes docs/RELIABILITY.md.
reliability: setup services
	PYTHONPATH=tools $(PY) tests/reliability/run.py

# The lost-line guard with only Python and git (patch <=> FILES.txt; the pull-request gate).
guard:
	$(PYTHON) tools/check_patch_files.py

# Every channel's release gates for the offline image (ci/gates.sh; CI runs the same).
ci-gates: setup-python
	PY=$(PY) ./ci/gates.sh

# A workflow's jobs on this machine, as GitHub Actions would run them (docs/ci.md): fresh
# clones, artifacts by name, throwaway keys, no GPU. Needs the loopback registry
# (`make services`). WORKFLOW: a file in .github/workflows; CHANNEL: release.yml's input.
WORKFLOW ?= release.yml
CHANNEL ?=
ci-local: $(VENV_STAMP)
	PYTHONPATH=tools $(PY) ci/local_runner.py $(WORKFLOW) $(if $(CHANNEL),--input channel=$(CHANNEL))

# The payload's Triton kernel compiled ahead of time for sm_89: compile evidence, not run
# evidence (docs/cuda-code.md). TRITON_PYTHON: a Python with triton==3.6.0; no GPU needed.
TRITON_PYTHON ?= python3
sm89-compile-evidence:
	$(TRITON_PYTHON) tools/compile_sm89.py

lint: $(VENV_STAMP)
	$(PIP) install -q -e '.[lint]'
	$(PY) -m ruff check tools tests bench ci
	@# the workflows (self-hosted labels in .github/actionlint.yaml), where actionlint is installed
	@if command -v actionlint >/dev/null; then actionlint; \
	  else echo "actionlint: not on PATH, the workflows are not linted (docs/ci.md)"; fi
	$(PY) -m mypy  # files and strictness: [tool.mypy] in pyproject.toml (package and tests)
	$(VENV_BIN)lint-imports  # the layers: [tool.importlinter] in pyproject.toml

# sdist + wheel with the standard builder, checked with twine (as CI does).
dist: $(VENV_STAMP)
	$(PIP) install -q build twine
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*

clean:
	rm -rf build dist *.egg-info .pytest_cache
