"""`make ci-local`: run a workflow's jobs on this machine as GitHub Actions would (docs/ci.md).

Each job (each matrix leg) runs its `run:` steps with bash in a fresh `git clone` of a
snapshot of the working tree (tracked files, uncommitted changes included) plus one commit
that trusts the run's throwaway keys; artifacts are handed over by name through a
directory as upload-artifact and download-artifact do; `${{ ... }}` comes from ci/local.yml.
A leg on a GPU label is not run (this machine has no GPU): later jobs get only the
evidence the repository holds, so a channel that needs new GPU evidence fails at its gate.

Exit status: 0 every job passed (and the release it proposed verifies), 1 a step or the
final check failed, 2 the workflow cannot run here as written.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

import workflow
from workflow import Leg, Refused

REPO = Path(__file__).resolve().parents[1]


class StepFailed(Exception):
    """A step exited non-zero (or an emulated action failed)."""


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False,
                       env={**os.environ, **(env or {})})
    if r.returncode:
        raise StepFailed(f"git {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout.strip()


class Run:
    """One run of one workflow: its origin repository, keys, venv and artifacts."""

    def __init__(self, name: str, config: dict[str, Any], tmp: Path, venv: Path) -> None:
        self.wf = config.get("workflows", {}).get(name, {})
        self.config, self.tmp, self.venv = config, tmp, venv
        self.artifacts = tmp / "artifacts"
        self.artifacts.mkdir()
        self.origin = tmp / "origin.git"
        self.secrets: dict[str, str] = {k: str(v) for k, v in config.get("secrets", {}).items()}
        self.sha = self.snapshot(self.make_keys())
        self.needs: dict[str, dict[str, Any]] = {}

    def make_keys(self) -> dict[str, Any]:
        """A throwaway key per key secret (the tool's own generator); their policy entries."""
        from patchbake.evidence import keys

        entries: dict[str, Any] = {}
        for secret, spec in self.config.get("keys", {}).items():
            made = keys.generate(self.tmp / "keys" / secret)
            self.secrets[secret] = made.private_path.read_text()
            # one holder per secret, as in a real repository (the release key's holder does
            # not approve: the trust policy's separation of duties refuses that)
            entry: dict[str, Any] = {"keyid": made.keyid,
                                     "owner": f"ci-local holder of {secret} (throwaway)",
                                     "public_key": made.public_pem}
            if spec.get("suites"):
                entry["allow"] = [{"predicate_type": "https://in-toto.io/attestation/"
                                   "test-result/v0.1", "suites": spec["suites"]}]
            if spec.get("roles"):
                entry["roles"] = spec["roles"]
            entries[f"ci-local-{secret.lower().replace('_', '-')}"] = entry
        return entries

    def snapshot(self, trusted: dict[str, Any]) -> str:
        """origin.git: the working tree as a commit, plus one that trusts the run's keys."""
        # every file git does not ignore, as it is now, through an index of our own
        index = {"GIT_INDEX_FILE": str(self.tmp / "index")}
        git("read-tree", "HEAD", cwd=REPO, env=index)
        git("add", "-A", cwd=REPO, env=index)
        tree = git("write-tree", cwd=REPO, env=index)
        snap = git("-c", "user.name=ci-local", "-c", "user.email=ci-local@localhost.invalid",
                   "commit-tree", tree, "-p", "HEAD", "-m", "ci-local: the working tree",
                   cwd=REPO)
        git("init", "-q", "--bare", str(self.origin), cwd=self.tmp)
        git("push", "-q", str(self.origin), f"{snap}:refs/heads/ci-local", cwd=REPO)
        try:  # the base a pull request's `git diff --check origin/main...HEAD` needs
            git("push", "-q", str(self.origin), "main:refs/heads/main", cwd=REPO)
        except StepFailed:
            say("no branch main here: origin/main will not exist in the jobs' clones")
        seed = self.tmp / "seed"
        git("clone", "-q", "-b", "ci-local", str(self.origin), str(seed), cwd=self.tmp)
        policy_path = seed / "manifests" / "trust-policy.yaml"
        policy = yaml.safe_load(policy_path.read_text())
        policy["keys"].update(trusted)
        policy_path.write_text("# ci-local: the committed policy plus this run's throwaway keys\n"
                               + yaml.safe_dump(policy, sort_keys=False))
        git("-c", "user.name=ci-local", "-c", "user.email=ci-local@localhost.invalid", "commit",
            "-qam", "ci-local: trust this run's throwaway keys", cwd=seed)
        git("push", "-q", "origin", "HEAD:refs/heads/ci-local", cwd=seed)
        return git("rev-parse", "HEAD", cwd=seed)

    def context(self, leg: Leg, steps: dict[str, Any]) -> dict[str, Any]:
        return {"github": {"sha": self.sha, "event_name": self.wf.get("event", "push"),
                           "token": "", "repository": "local/patchbake", "ref_name": "ci-local"},
                "inputs": self.wf.get("inputs", {}), "vars": self.config.get("vars", {}),
                "secrets": self.secrets, "matrix": leg.matrix, "steps": steps,
                "needs": {n: self.needs.get(n, {}) for n in leg.needs}, "env": {},
                "runner": {"temp": str(self.tmp)}}

    # -- one job ---------------------------------------------------------------------------
    def run_leg(self, leg: Leg, doc_env: dict[str, Any]) -> str:
        runs_on = leg.spec.get("runs-on", [])
        ctx = self.context(leg, {})
        labels = workflow.substitute([runs_on] if isinstance(runs_on, str) else list(runs_on), ctx)
        if "if" in leg.spec and not workflow.evaluate(str(leg.spec["if"]).strip("${} "), ctx):
            say(f"{leg.title}: skipped (if: {leg.spec['if']})")
            return "skipped"
        gpu = [lab for lab in labels if lab in self.config.get("no_gpu_labels", [])]
        if gpu:
            say(f"{leg.title}: NOT RUN: no GPU here (runs-on {labels}); no evidence is made up, "
                "the later jobs see only the evidence the repository holds")
            self.needs[leg.key] = {"result": "skipped", "outputs": {}}
            return "no GPU"
        if "container" in leg.spec:
            say(f"{leg.title}: container {leg.spec['container']['image']}: its steps run on "
                "this machine, not in the container")
        env_name = leg.spec.get("environment")
        env_name = env_name.get("name") if isinstance(env_name, dict) else env_name
        if env_name:
            say(f"{leg.title}: environment {env_name}: its reviewers' approval is taken as "
                "given; its secrets are ci/local.yml's")
        work = self.tmp / "jobs" / leg.title.replace(" ", "_").replace(",", "")
        work.mkdir(parents=True)
        steps: dict[str, Any] = {}
        for step in leg.spec.get("steps", []):
            ctx = self.context(leg, steps)
            env = {**workflow.substitute(doc_env, ctx),
                   **workflow.substitute(leg.spec.get("env", {}), ctx),
                   **workflow.substitute(step.get("env", {}), ctx)}
            title = workflow.substitute(step.get("name") or step.get("uses") or
                                        step["run"].splitlines()[0], ctx)
            say(f"{leg.title} / {title}")
            start = time.monotonic()
            outputs = self.step(step, ctx, env, work)
            say(f"{leg.title} / {title}: ok ({time.monotonic() - start:.1f} s)")
            if step.get("id"):
                steps[step["id"]] = {"outputs": outputs}
        self.needs[leg.key] = {"result": "success", "outputs": workflow.substitute(
            leg.spec.get("outputs", {}), self.context(leg, steps))}
        return "success"

    def step(self, step: dict[str, Any], ctx: dict[str, Any], env: dict[str, str],
             work: Path) -> dict[str, str]:
        if "uses" in step:
            action = step["uses"].split("@")[0]
            self.action(action, workflow.substitute(step.get("with", {}), ctx), work)
            return {}
        out_file = work.parent / f"{work.name}.output"
        out_file.write_text("")
        full = {**os.environ, **{k: str(v) for k, v in env.items()},
                "VIRTUAL_ENV": str(self.venv),
                "PATH": f"{self.venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
                "GITHUB_OUTPUT": str(out_file), "GITHUB_SHA": self.sha,
                "GITHUB_WORKSPACE": str(work), "RUNNER_TEMP": str(self.tmp), "CI": "true"}
        # a job sees its checkout and the runner's venv, never this make's variables or path
        for leak in ("PYTHONPATH", "PY", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
            full.pop(leak, None)
        script = workflow.substitute(step["run"], ctx)
        cwd = work / step.get("working-directory", ".")
        r = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                           cwd=cwd, env=full, check=False)
        if r.returncode:
            raise StepFailed(f"`{script.strip().splitlines()[0]}` exited {r.returncode}")
        lines = out_file.read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line)

    # -- the emulated actions --------------------------------------------------------------
    def action(self, action: str, w: dict[str, Any], work: Path) -> None:
        if action == "actions/checkout":
            git("clone", "-q", str(self.origin), str(work), cwd=self.tmp)
            git("checkout", "-q", self.sha, cwd=work)
        elif action == "actions/setup-python":
            say(f"  setup-python: the runner's virtual environment {self.venv}")
        elif action == "actions/upload-artifact":
            self.upload(w, work)
        elif action == "actions/download-artifact":
            self.download(w, work)

    def upload(self, w: dict[str, Any], work: Path) -> None:
        name = w.get("name", "artifact")
        paths = [work / p for p in str(w["path"]).split()]
        # a path that matches nothing adds nothing (as upload-artifact: if-no-files-found)
        files = [f for p in paths for f in ([p] if p.is_file() else
                                            sorted(p.rglob("*")) if p.is_dir() else [])
                 if f.is_file()]
        if not files:
            how = w.get("if-no-files-found", "warn")
            if how == "error":
                raise StepFailed(f"upload-artifact {name}: no files found at {w['path']}")
            say(f"  upload-artifact {name}: no files found ({how})")
            return
        dest = self.artifacts / name
        if dest.exists():
            raise StepFailed(f"upload-artifact: an artifact named {name} exists already")
        root = Path(os.path.commonpath(paths))
        root = root.parent if root.is_file() else root
        for f in files:
            (dest / f.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest / f.relative_to(root))
        say(f"  upload-artifact {name}: {len(files)} file(s)")

    def download(self, w: dict[str, Any], work: Path) -> None:
        target = work / w.get("path", ".")
        if "name" in w:
            if not (self.artifacts / w["name"]).is_dir():
                raise StepFailed(f"download-artifact: artifact not found: {w['name']}")
            names, merge = [w["name"]], True
        else:
            pattern = w.get("pattern", "*")
            names = sorted(p.name for p in self.artifacts.iterdir()
                           if fnmatch.fnmatchcase(p.name, pattern))
            merge = str(w.get("merge-multiple", False)).lower() == "true"
        for name in names:
            shutil.copytree(self.artifacts / name, target if merge else target / name,
                            dirs_exist_ok=True)
        say(f"  download-artifact: {', '.join(names) or 'none matched'} into {w.get('path', '.')}")

    # -- after the jobs --------------------------------------------------------------------
    def verify_release(self, pattern: str) -> None:
        """The proposed branch must hold a release that `release verify` accepts."""
        heads = git("for-each-ref", "--format=%(refname:short)", "refs/heads", cwd=self.origin)
        branches = [b for b in heads.split() if fnmatch.fnmatchcase(b, pattern)]
        if len(branches) != 1:
            raise StepFailed(f"the run proposed {len(branches)} release branch(es) matching "
                             f"{pattern}, not 1: no release to verify")
        check = self.tmp / "verify"
        git("clone", "-q", "-b", branches[0], str(self.origin), str(check), cwd=self.tmp)
        last = (check / "manifests/releases/ledger.jsonl").read_text().splitlines()[-1]
        release = json.loads(last)["release"]
        for argv in (["ledger", "verify"], ["release", "verify", release]):
            say(f"{branches[0]}: patchbake {' '.join(argv)}")
            r = subprocess.run([str(self.venv / "bin" / "python"), "-m", "patchbake", *argv],
                               cwd=check, env={**os.environ, "PYTHONPATH": "tools"},
                               check=False)
            if r.returncode:
                raise StepFailed(f"patchbake {' '.join(argv)} exited {r.returncode} on the "
                                 f"proposed branch {branches[0]}")
        say(f"release {release} on {branches[0]}: VERIFIED")


def say(line: str) -> None:
    print(f"[ci-local] {line}", flush=True)


def ensure_venv(venv: Path) -> None:
    """The runner's tool cache: one virtual environment every job's `make` uses."""
    if not (venv / "bin" / "python").exists():
        say(f"making the runner's virtual environment {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                        "pip>=25"], check=True)


def run(path: Path, config: dict[str, Any], venv: Path, keep: bool) -> int:
    legs = workflow.plan(path, config)
    doc = workflow.load(path)
    ensure_venv(venv)
    tmp = Path(tempfile.mkdtemp(prefix="patchbake-ci-local-"))
    results: list[tuple[str, str, float]] = []
    code = 0
    try:
        r = Run(path.name, config, tmp, venv)
        for leg in legs:
            start = time.monotonic()
            try:
                outcome = r.run_leg(leg, doc.get("env", {}))
            except StepFailed as exc:
                say(f"{leg.title}: FAILED: {exc}")
                results.append((leg.title, "FAILED", time.monotonic() - start))
                code = 1
                break
            results.append((leg.title, outcome, time.monotonic() - start))
        pattern = r.wf.get("verify_release_branch")
        if code == 0 and pattern:
            try:
                r.verify_release(pattern)
            except StepFailed as exc:
                say(f"FAILED: {exc}")
                code = 1
    finally:
        for title, outcome, secs in results:
            say(f"  {title:28} {outcome:10} {secs:6.1f} s")
        if keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    say(f"{path.name}: {'PASSED' if code == 0 else 'FAILED'}")
    return code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ci-local", description=__doc__.splitlines()[0])
    ap.add_argument("workflow", nargs="?", default="release.yml",
                    help="a file in .github/workflows/ (default release.yml)")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=VALUE",
                    help="a workflow_dispatch input (e.g. channel=validated)")
    ap.add_argument("--config", type=Path, default=REPO / "ci" / "local.yml")
    ap.add_argument("--venv", type=Path, default=REPO / ".work" / "ci-local" / "venv")
    ap.add_argument("--plan", action="store_true", help="print the legs and exit")
    ap.add_argument("--keep", action="store_true", help="keep the run's directory")
    a = ap.parse_args(argv)
    config = yaml.safe_load(a.config.read_text())
    wf = config.setdefault("workflows", {}).setdefault(a.workflow, {})
    wf["inputs"] = {**wf.get("inputs", {}), **dict(i.split("=", 1) for i in a.input)}
    path = REPO / ".github" / "workflows" / a.workflow
    try:
        if a.plan:
            for leg in workflow.plan(path, config):
                say(f"{leg.title}: {len(leg.spec.get('steps', []))} steps")
            return 0
        return run(path, config, a.venv.resolve(), a.keep)
    except Refused as exc:
        say(f"REFUSED: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
