"""A GitHub Actions workflow as `make ci-local` reads it: jobs in `needs:` order, matrix legs
expanded, `${{ ... }}` expressions evaluated, and everything this machine cannot do as
GitHub would refused before a step runs (docs/ci.md). Pure: no process, no file written.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# `uses:` actions the runner emulates (ci/local_runner.py); any other is refused.
EMULATED = ("actions/checkout", "actions/upload-artifact", "actions/download-artifact",
            "actions/setup-python")
JOB_KEYS = {"name", "needs", "runs-on", "container", "environment", "env", "steps", "strategy",
            "outputs", "permissions", "if", "timeout-minutes", "concurrency"}
STEP_KEYS = {"name", "id", "uses", "with", "run", "env", "shell", "working-directory", "if"}
CONTEXTS = {"github", "inputs", "vars", "secrets", "matrix", "needs", "steps", "env", "runner"}
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
_TERM = r"(?:'[^']*'|[A-Za-z_][\w.-]*)"
_COMPARE = re.compile(rf"^({_TERM})\s*(==|!=)\s*({_TERM})$")


class Refused(Exception):
    """The workflow cannot run here as written: the message says what and where."""


@dataclass(frozen=True)
class Leg:
    """One job, or one leg of a job's matrix."""

    key: str
    spec: dict[str, Any]
    matrix: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return self.key + (f" ({', '.join(map(str, self.matrix.values()))})" if self.matrix else "")

    @property
    def needs(self) -> list[str]:
        n = self.spec.get("needs", [])
        return [n] if isinstance(n, str) else list(n)


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), dict):
        raise Refused(f"{path.name}: not a workflow (no jobs: mapping)")
    # YAML 1.1 reads the key `on` as True
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


def job_order(jobs: dict[str, Any]) -> list[str]:
    """Job ids so that each comes after its needs (file order otherwise)."""
    done: list[str] = []
    pending = list(jobs)
    while pending:
        ready = [j for j in pending if all(n in done for n in Leg(j, jobs[j]).needs)]
        if not ready:
            bad = {j: [n for n in Leg(j, jobs[j]).needs if n not in done] for j in pending}
            raise Refused(f"needs: cannot be ordered (unknown job or a cycle): {bad}")
        done.append(ready[0])
        pending.remove(ready[0])
    return done


def legs(key: str, spec: dict[str, Any]) -> list[Leg]:
    matrix = dict((spec.get("strategy") or {}).get("matrix") or {})
    include = matrix.pop("include", [])
    if matrix.pop("exclude", None):
        raise Refused(f"job {key}: matrix exclude is not supported by ci-local")
    axes = [[(k, v) for v in values] for k, values in matrix.items()]
    combos = [dict(c) for c in itertools.product(*axes)] if axes else []
    combos += [dict(i) for i in include]
    return [Leg(key, spec, c) for c in combos] or [Leg(key, spec)]


def lookup(path: str, ctx: dict[str, Any]) -> Any:
    """`a.b.c` in the contexts; a missing leaf is '' (as on GitHub), a missing context refused."""
    root, *rest = path.split(".")
    if root not in CONTEXTS:
        raise Refused(f"expression context {root!r} is not one ci-local knows ({path})")
    value: Any = ctx.get(root, {})
    for part in rest:
        value = value.get(part, "") if isinstance(value, dict) else ""
    return value


def evaluate(expr: str, ctx: dict[str, Any]) -> Any:
    """The expressions the workflows use: a context path, a 'literal', or a == / != of two."""
    m = _COMPARE.match(expr)
    if m:
        left, right = evaluate(m.group(1), ctx), evaluate(m.group(3), ctx)
        return (left == right) == (m.group(2) == "==")
    if re.fullmatch(r"'[^']*'", expr):
        return expr[1:-1]
    if re.fullmatch(r"[A-Za-z_][\w.-]*", expr):
        return lookup(expr, ctx)
    raise Refused(f"expression '${{{{ {expr} }}}}' is beyond what ci-local evaluates "
                  "(context paths, 'literals', == and !=)")


def substitute(value: Any, ctx: dict[str, Any]) -> Any:
    """Every ${{ ... }} in a string (or in a list's or mapping's strings) replaced."""
    if isinstance(value, dict):
        return {k: substitute(v, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, ctx) for v in value]
    if isinstance(value, str):
        return EXPR.sub(lambda m: _text(evaluate(m.group(1), ctx)), value)
    return value


def _text(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def check_leg(leg: Leg, declared_inputs: set[str], config: dict[str, Any]) -> list[str]:
    """What in this leg ci-local would refuse to run, or could not resolve; [] when none."""
    out = [f"job {leg.key}: key {k!r} is not supported" for k in leg.spec if k not in JOB_KEYS]
    ids = {s.get("id") for s in leg.spec.get("steps", [])}
    known = {"inputs": declared_inputs, "vars": set(config.get("vars", {})),
             "secrets": set(config.get("secrets", {})) | set(config.get("keys", {})),
             "matrix": set(leg.matrix), "needs": set(leg.needs), "steps": ids}
    for expr in EXPR.findall(yaml.safe_dump(leg.spec)):
        for path in re.findall(r"[A-Za-z_][\w-]*(?:\.[\w-]+)+", re.sub(r"'[^']*'", "", expr)):
            root, name = path.split(".")[:2]
            if root not in CONTEXTS:
                out.append(f"job {leg.key}: unknown context in '{expr}'")
            elif root in known and name not in known[root]:
                out.append(f"job {leg.key}: '{path}' names nothing ci-local provides")
    for i, step in enumerate(leg.spec.get("steps", []), 1):
        where = f"job {leg.key}, step {i}"
        out += [f"{where}: key {k!r} is not supported" for k in step if k not in STEP_KEYS]
        uses = step.get("uses")
        if uses and uses.split("@")[0] not in EMULATED:
            out.append(f"{where}: `uses: {uses}` is not emulated by ci-local "
                       f"(only {', '.join(EMULATED)}); write the step as `run:`")
        if ("uses" in step) == ("run" in step):
            out.append(f"{where}: a step needs exactly one of uses: and run:")
    return out


def plan(path: Path, config: dict[str, Any]) -> list[Leg]:
    """The legs to run, in order; Refused listing every problem when there is one."""
    doc = load(path)
    jobs = doc["jobs"]
    on = doc.get("on") or {}
    dispatch = (on.get("workflow_dispatch") or {}) if isinstance(on, dict) else {}
    declared = set((dispatch.get("inputs") or {}))
    ordered = [leg for key in job_order(jobs) for leg in legs(key, jobs[key])]
    problems = [p for leg in ordered for p in check_leg(leg, declared, config)]
    if problems:
        raise Refused(f"{path.name}: " + "; ".join(problems))
    return ordered
