"""pipeline.yaml `channels:` and the trust policy's version 2 roles: validated at load,
every mistake one clear line with exit code 3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from patchbake import config
from patchbake.entry import main
from patchbake.errors import ConfigError
from patchbake.evidence import keys, policy

REPO = Path(__file__).resolve().parents[2]


def test_repository_channels_are_cumulative_in_order() -> None:
    p = config.load(REPO / "pipeline.yaml")
    chs = p.channels
    assert list(chs) == ["candidate", "validated", "sm89-stable"]
    assert [g.kind for g in chs["candidate"].gates] == ["guard", "record", "verify",
                                                        "reproducible", "cuda-code"]
    assert chs["candidate"].gates[-1].cuda_target == "8.9"
    kinds = [g.kind for g in chs["sm89-stable"].gates]
    assert kinds[:6] == [g.kind for g in chs["validated"].gates]
    assert kinds[6:] == ["capability", "benchmark", "approval"]
    assert chs["validated"].gates[-1].suites == ("dsv4-topk-gpu", "dsv4-topk-cpu", "dsv4-served-gpu")
    assert chs["sm89-stable"].gates[-3].capability == "8.9"


def _load(tmp_path: Path, chans: Any) -> None:
    pipe = yaml.safe_load((REPO / "pipeline.yaml").read_text())
    pipe["channels"] = chans
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(pipe))
    config.load(path)


@pytest.mark.parametrize("chans, message", [
    ({"c": {"gates": ["gaurd"]}}, "unknown gate kind 'gaurd'; did you mean 'guard'?"),
    ({"c": {"gates": ["guard"], "gate": 1}}, "unknown key 'channels.c.gate'"),
    ({"c": {"gates": ["evidence"]}}, "'channels.c.suites' must list the suites"),
    ({"c": {"gates": ["evidence"], "suites": ["nope"]}}, "names 'nope', which is not a declared suite"),
    ({"c": {"gates": ["capability"], "capability": "sm89"}}, "must be a compute capability"),
    ({"c": {"gates": ["benchmark"]}}, "'channels.c.benchmark' ({name, tolerance}) is needed"),
    ({"c": {"gates": ["benchmark"], "benchmark": {"name": "b", "tolerance": 2}}},
     "tolerance' must be in [0, 1)"),
    ({"a": {"gates": ["guard"]}, "b": {"gates": ["guard"]}}, "repeats gate 'guard'"),
    ({"c": {"gates": ["guard"], "capability": "8.9"}}, "the channel has no 'capability' gate"),
    ({"c": {"gates": ["cuda-code"]}}, "'channels.c.cuda_target' must be a compute capability"),
    ({"c": {"gates": ["cuda-code"], "cuda_target": "sm_89"}}, "cuda_target' must be a compute"),
    ({"c": {"gates": ["guard"], "cuda_target": "8.9"}}, "the channel has no 'cuda-code' gate"),
    ({"c": {}}, "missing required key 'channels.c.gates'"),
    ({"Bad Name": {"gates": []}}, "channel name 'Bad Name'"),
])
def test_bad_channels_are_refused_at_load(tmp_path: Path, chans: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, chans)
    assert message in err.value.one_line()


def test_unknown_channel_is_a_config_error_on_the_command_line(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    monkeypatch.setenv("PATCHBAKE_PIPELINE", str(REPO / "pipeline.yaml"))
    monkeypatch.setenv("PATCHBAKE_HOME", str(tmp_path / "store"))
    assert main(["release", "gates", "--channel", "validatd", "--image",
                 "sm89-serving-offline@sha256:" + "0" * 64]) == 3
    assert "no channel 'validatd'; did you mean 'validated'?" in capsys.readouterr().err


def _policy(tmp_path: Path, version: int, top: dict[str, Any] | None = None,
            **entry: Any) -> policy.Policy:
    made = keys.generate(tmp_path / "k")
    body = {"keyid": made.keyid, "public_key": made.public_pem, **entry}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"version": version, "keys": {"k": body}, **(top or {})}))
    return policy.load(path)


def test_policy_v2_roles(tmp_path: Path) -> None:
    pol = _policy(tmp_path, 2, {"separation_of_duties": False}, roles=["approver", "release"],
                  channels=["sm89-*"])
    assert not pol.separation_of_duties
    (t,) = pol.keys.values()
    assert t.approves("sm89-stable") and not t.approves("validated")
    assert list(pol.with_role("release")) == [t.keyid] and t.grants == ()


def test_repository_policy_gives_the_release_key_the_release_role() -> None:
    pol = policy.load(REPO / "manifests" / "trust-policy.yaml")
    assert pol.version == 2
    assert {t.name for t in pol.keys.values() if "release" in t.roles} == \
        {"patchbake-release-2026-12", "patchbake-release-2026-12-02",
         "patchbake-release-2026-12-02b", "patchbake-release-2026-12-02c"}
    assert not any("approver" in t.roles for t in pol.keys.values())


@pytest.mark.parametrize("version, entry, message", [
    (1, {"roles": ["release"], "allow": []}, "need 'version: 2'"),
    (2, {"roles": ["relase"]}, "'relase', not one of release, approver; did you mean 'release'?"),
    (2, {}, "has neither 'allow' nor 'roles'"),
    (1, {}, "missing required key 'keys.k.allow'"),
    (3, {"roles": ["release"]}, "'version' must be 1 or 2"),
])
def test_bad_policy_roles_are_refused(tmp_path: Path, version: int, entry: dict[str, Any],
                                      message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _policy(tmp_path, version, **entry)
    assert message in err.value.one_line()


def test_bake_cache_key_follows_the_revision_label() -> None:
    """The reproducible gate found it: the SOURCE commit is baked into a label, so a bake
    cached under a key without it differed from a fresh bake of the same patch."""
    from types import SimpleNamespace

    from patchbake.images.bake import bake_key

    defn = SimpleNamespace(fingerprint="f", lineage="v0.25.1", name="d")
    base = SimpleNamespace(manifest_digest="sha256:" + "1" * 64)
    patched = SimpleNamespace(patch_sha256="p", files_sha256="f", tree_digest="t",
                              pristine_digest="d")
    a = bake_key(defn, base, patched, 0, "embedded", "a" * 40)  # type: ignore[arg-type]
    b = bake_key(defn, base, patched, 0, "embedded", "b" * 40)  # type: ignore[arg-type]
    assert a != b
