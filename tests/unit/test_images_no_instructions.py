"""Verify takes no instructions from the image under test: site-packages comes from the
definition (a disagreeing label is a failure), a layer above the base may write only the
baked set, and anything that changes what Python runs at start-up is a failure unless the
definition allow-lists it by content."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from images_craft import layer, with_config, with_layer
from images_support import SP, Repo, make_repo
from patchbake.digest import Digest
from patchbake.images.bake import bake_image
from patchbake.entry import main
from patchbake.errors import ConfigError, ImageError, VerifyError
from patchbake.verify.baked import raise_on_failure, verify_image

sp = SP.strip("/")
EVIL = b"import os; os.system('id')\n"


def _baked(tmp_path: Path) -> tuple[Repo, Digest]:
    repo = make_repo(tmp_path)
    return repo, bake_image(repo.pipeline, "offline", repo.store, patched=repo.patched).digest


def _verify(repo: Repo, ref: str | Digest):  # type: ignore[no-untyped-def]
    return verify_image(repo.pipeline, ref, repo.store, patched=repo.patched,
                        definition="offline")


def _problems(repo: Repo, ref: str | Digest) -> list[str]:
    res = _verify(repo, ref)
    assert not res.ok
    return list(res.problems)


def test_site_packages_label_is_not_obeyed(tmp_path: Path) -> None:
    repo, digest = _baked(tmp_path)
    good = {rel: (repo.patched.root / rel).read_bytes() for rel in repo.patched.files}
    # a faithful copy of the baked files where the label points; foreign code where the
    # definition (and Python) look
    decoy = [(f"opt/decoy/{rel}", data) for rel, data in good.items()]
    decoy += [(f"opt/decoy/vllm/{n}", b"x") for n in ("__init__.py", "sampling_params.py")]
    evil = with_layer(repo.store, digest, layer([*decoy, (f"{sp}/vllm/envs.py", EVIL)]))
    manifest = json.loads(repo.store.read_blob(evil))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    labels = {**config["config"]["Labels"], "dev.patchbake.site-packages": "/opt/decoy"}
    relabelled = with_config(repo.store, evil, {"Labels": labels})
    res = _verify(repo, relabelled)
    assert not res.ok
    assert any("label dev.patchbake.site-packages='/opt/decoy' disagrees with the definition"
               in p for p in res.problems)
    envs = next(m for m in res.mismatched if m["path"] == "vllm/envs.py")
    assert envs["found"] == hashlib.sha256(EVIL).hexdigest()  # read where Python reads
    with pytest.raises(VerifyError) as info:
        raise_on_failure(res)
    assert info.value.exit_code == VerifyError.exit_code


def test_an_unrecorded_image_needs_a_named_definition(tmp_path: Path) -> None:
    repo, digest = _baked(tmp_path)
    crafted = with_config(repo.store, digest, {"WorkingDir": "/tmp"})
    with pytest.raises(ImageError, match="cannot tell which image definition") as info:
        verify_image(repo.pipeline, crafted, repo.store, patched=repo.patched)
    assert info.value.exit_code == ImageError.exit_code
    # the recorded bake is found by its digest without being named
    res = verify_image(repo.pipeline, digest, repo.store, patched=repo.patched)
    assert res.ok and "from the image record" in res.extra["expected_from"]
    with pytest.raises(ImageError, match="disagrees with definition"):
        verify_image(repo.pipeline, digest, repo.store, patched=repo.patched,
                     site_packages="/opt/elsewhere")


@pytest.mark.parametrize("name,data,why", [
    ("vllm/evil.py", EVIL, "writes a file outside the baked set"),
    ("vllm/__pycache__/envs.cpython-312.pyc", b"\x00" * 32, "writes a file outside the baked"),
    ("vllm/__init__.py", b"# same place, new bytes\n", "writes a file outside the baked set"),
])
def test_a_layer_above_the_base_may_write_only_the_baked_set(
        tmp_path: Path, name: str, data: bytes, why: str) -> None:
    repo, digest = _baked(tmp_path)
    res = _verify(repo, with_layer(repo.store, digest, layer([(f"{sp}/{name}", data)])))
    assert not res.ok
    assert {m["path"] for m in res.mismatched} == {name} and why in res.mismatched[0]["why"]
    assert name not in res.base_drift["changed"] + res.base_drift["extra"]


def test_a_layer_above_the_base_may_delete_only_what_the_patch_deletes(tmp_path: Path) -> None:
    repo, digest = _baked(tmp_path)
    res = _verify(repo, with_layer(repo.store, digest, layer([
        (f"{sp}/vllm/.wh.sampling_params.py", b"")])))
    assert [m["why"] for m in res.mismatched] == [
        "layer 3 (above the base) deletes it; the patch does not"]
    assert res.base_drift["missing"] == []  # not base drift: the base has it
    res = _verify(repo, with_layer(repo.store, digest, layer([(f"{sp}/.wh.vllm", b"")])))
    assert not res.ok and any(m["path"] == "vllm" for m in res.mismatched)
    # the base's own layers are not the pinned base: a failure, whatever the files say
    manifest = json.loads(repo.store.read_blob(digest))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    from images_craft import rewrite

    extra = layer([("etc/motd", b"hi\n")])
    hexd = repo.store.put_bytes(extra)
    manifest["layers"].insert(0, {**manifest["layers"][0], "digest": str(hexd),
                                  "size": len(extra)})
    config["rootfs"]["diff_ids"].insert(0, str(hexd))
    shifted = rewrite(repo.store, manifest, config)
    assert any("first 2 layers are not the base" in p for p in _problems(repo, shifted))


PY = "usr/lib/python3.12"
HOOKS = [
    (f"{sp}/zz-evil.pth", b"import os; os.system('id')\n", "a .pth file in a site directory"),
    (f"{PY}/sitecustomize.py", EVIL, "sitecustomize (imported by site"),
    (f"{PY}/lib-dynload/sitecustomize.cpython-312-x86_64-linux-gnu.so", b"\x7fELF",
     "sitecustomize (imported by site"),
    ("usr/lib/python3/dist-packages/usercustomize.py", EVIL, "usercustomize"),
    ("root/.local/lib/python3.12/site-packages/hook.pth", b"import evil\n", ".pth file"),
    ("usr/local/lib/python3.12/site-packages/vllm.py", EVIL, "a second 'vllm' on sys.path"),
    (f"{sp}/vllm.py", EVIL, "a second 'vllm' on sys.path"),
    ("usr/lib/python3/dist-packages/vllm/__init__.py", EVIL, "a second 'vllm'"),
    ("usr/lib/python312.zip", b"PK\x05\x06" + b"\x00" * 18, "a zip on sys.path"),
]


@pytest.mark.parametrize("path,data,why", HOOKS, ids=[h[0] for h in HOOKS])
def test_startup_hooks_anywhere_on_the_python_path_fail(
        tmp_path: Path, path: str, data: bytes, why: str) -> None:
    repo, digest = _baked(tmp_path)
    found = _problems(repo, with_layer(repo.store, digest, layer([(path, data)])))
    assert len(found) == 1 and found[0].startswith(f"/{path}: ") and why in found[0]


def test_startup_hook_as_a_symlink_is_refused(tmp_path: Path) -> None:
    repo, digest = _baked(tmp_path)
    found = _problems(repo, with_layer(repo.store, digest, layer(
        [], links={f"{sp}/evil.pth": "/tmp/payload.pth"})))
    assert found == [(f"/{sp}/evil.pth: a .pth file in a site directory (its import lines run "
                      "at start-up); it is a symlink whose target is not an allow-listed file "
                      "of the image (allow-list the target path too)")]


@pytest.mark.parametrize("env", ["PYTHONPATH=/opt/evil", "PYTHONSTARTUP=/opt/evil.py",
                                 "PYTHONHOME=/opt/py", "PYTHONWARNINGS=ignore::evil.Warn",
                                 "PYTHONPYCACHEPREFIX=/tmp/pyc", "LD_PRELOAD=/opt/evil.so"])
def test_startup_environment_fails(tmp_path: Path, env: str) -> None:
    repo, digest = _baked(tmp_path)
    manifest = json.loads(repo.store.read_blob(digest))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    crafted = with_config(repo.store, digest, {"Env": [*config["config"]["Env"], env]})
    (found,) = _problems(repo, crafted)
    assert found.startswith(f"image config Env {env.split('=')[0]}=")


def test_sitecustomize_in_a_pythonpath_dir_is_seen(tmp_path: Path) -> None:
    repo, digest = _baked(tmp_path)
    crafted = with_layer(repo.store, digest, layer([("opt/lib/sitecustomize.py", EVIL)]),
                         {"Env": ["PATH=/usr/bin", "PYTHONPATH=/opt/lib"]})
    found = _problems(repo, crafted)
    assert any(p.startswith("/opt/lib/sitecustomize.py: sitecustomize") for p in found)
    assert any(p.startswith("image config Env PYTHONPATH=") for p in found)


def test_entrypoint_change_fails(tmp_path: Path) -> None:
    repo, digest = _baked(tmp_path)
    crafted = with_config(repo.store, digest, {"Entrypoint": ["python3", "-c", "import evil"]})
    (found,) = _problems(repo, crafted)
    assert found.startswith("image config Entrypoint ['python3', '-c', 'import evil'] differs")


def _allow(repo: Repo, text: str, name: str = "offline") -> None:
    p = repo.root / "images" / f"{name}.yaml"
    p.write_text(p.read_text() + text)


def test_allow_list_pins_base_hooks_by_content(tmp_path: Path) -> None:
    from images_craft import entry, layout_dir

    repo, _ = _baked(tmp_path)
    pth = b"/opt/extra\n"
    # a base (pinned by digest) that carries a .pth file and sets PYTHONPATH
    base = with_layer(repo.store, repo.standin_digest, layer([(f"{sp}/extra.pth", pth)]),
                      {"Env": ["PATH=/usr/bin", "PYTHONPATH=/opt/lib"]})
    layout_dir(repo.store, repo.root / "base", [entry(repo.store, base)], [base])
    text = (repo.root / "images" / "offline.yaml").read_text()
    repo.define("hooked", text.replace(str(repo.standin_digest), str(base)).replace(
        "source: standin", "source: oci-layout\n  path: base"))
    bake_image(repo.pipeline, "hooked", repo.store, patched=repo.patched)

    def check() -> list[str]:
        return list(verify_image(repo.pipeline, "hooked", repo.store,
                                 patched=repo.patched).problems)

    found = check()
    assert found[0].startswith(f"/{sp}/extra.pth: a .pth file") and len(found) == 2
    assert found[1].startswith("image config Env PYTHONPATH='/opt/lib' changes")
    env = hashlib.sha256(b"PYTHONPATH=/opt/lib").hexdigest()
    _allow(repo, f"startup_allow:\n  - path: /{sp}/extra.pth\n"
                 f"    sha256: {hashlib.sha256(pth).hexdigest()}\n"
                 f"  - path: env:PYTHONPATH\n    sha256: {env}\n", "hooked")
    # the image baked before the allow-list changed carries the old one (its in-image check
    # would refuse the hooks): a finding until it is re-baked
    (stale,) = check()
    assert stale.startswith("/opt/patchbake/identity.json says startup_allow = []")
    bake_image(repo.pipeline, "hooked", repo.store, patched=repo.patched)
    assert check() == []
    text = (repo.root / "images" / "hooked.yaml").read_text()
    (repo.root / "images" / "hooked.yaml").write_text(text.replace(env, "e" * 64))
    bake_image(repo.pipeline, "hooked", repo.store, patched=repo.patched)
    (changed,) = check()
    assert "(allow-list names another sha256)" in changed or "not allow-listed" in changed


def test_allow_list_is_validated(tmp_path: Path) -> None:
    repo, _ = _baked(tmp_path)
    _allow(repo, "startup_allow:\n  - path: relative.pth\n    sha256: " + "a" * 64 + "\n")
    with pytest.raises(ConfigError, match=r"'startup_allow\[0\]'.path must be an absolute"):
        _verify(repo, "offline")


def test_cli_verify_names_the_definition(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    repo, digest = _baked(tmp_path)
    monkeypatch.setenv("PATCHBAKE_HOME", str(repo.store.root))
    import patchbake.verify.baked as baked_mod

    monkeypatch.setattr(baked_mod, "patched_tree", lambda lin, store: repo.patched)
    pipe = ["--pipeline", str(repo.root / "pipeline.yaml")]
    crafted = with_layer(repo.store, digest, layer([(f"{sp}/evil.pth", EVIL)]))
    assert main([*pipe, "verify", str(crafted)]) == ImageError.exit_code
    assert "cannot tell which image definition" in capsys.readouterr().err
    assert main([*pipe, "verify", str(crafted), "--definition", "offline"]) == \
        VerifyError.exit_code
    err = capsys.readouterr().err
    assert f"/{sp}/evil.pth: a .pth file in a site directory" in err


@pytest.mark.parametrize("path", ["usr/lib/python3.12/os.py", "usr/local/bin/vllm",
                                  "etc/ld.so.preload", "opt/patchbake/logging.json",
                                  "opt/patchbake/sub/x.py"])
def test_a_layer_above_the_base_may_not_write_outside_vllm(tmp_path: Path, path: str) -> None:
    """/opt/patchbake/ holds the four files bake writes and nothing else (a settings file
    there could be named by a variable a program reads)."""
    repo, digest = _baked(tmp_path)
    res = _verify(repo, with_layer(repo.store, digest, layer([(path, EVIL)])))
    assert [(m["path"], m["why"]) for m in res.mismatched] == [
        (f"/{path}", ("layer 3 (above the base) writes outside the baked set and "
                      "the files bake writes to /opt/patchbake"))]


@pytest.mark.parametrize("env", [
    "VLLM_LOGGING_CONFIG_PATH=/opt/patchbake/identity.json",  # vLLM reads it at import
    "VLLM_PLUGINS=evil", "HOME=/tmp", "PATH=/opt/evil:/usr/bin"])
def test_every_environment_variable_is_the_bases(tmp_path: Path, env: str) -> None:
    """Programs read settings at start (vLLM's VLLM_* name files it loads and callables it
    imports): the image's Env is the base's, variable for variable, unless allow-listed."""
    repo, digest = _baked(tmp_path)
    manifest = json.loads(repo.store.read_blob(digest))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    base_env = config["config"]["Env"]
    name = env.partition("=")[0]
    crafted = with_config(repo.store, digest,
                          {"Env": [e for e in base_env if not e.startswith(name + "=")] + [env]})
    found = _problems(repo, crafted)
    assert [p for p in found if p.startswith(f"image config Env {name}=")], found
    removed = with_config(repo.store, digest, {"Env": base_env[1:]})  # one dropped
    dropped = base_env[0].partition("=")[0]
    assert any(p.startswith(f"image config Env {dropped}=None differs from the base's")
               for p in _problems(repo, removed))


def test_the_start_up_wrapper_cannot_be_dropped(tmp_path: Path) -> None:
    """An image whose entrypoint is the base's again (no wrapper) would start without the
    opt-in self-check ever running: a failure, not 'the base's entrypoint'."""
    repo, digest = _baked(tmp_path)
    manifest = json.loads(repo.store.read_blob(digest))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    assert config["config"]["Entrypoint"][0] == "/opt/patchbake/entrypoint.sh"
    base_entry = config["config"]["Entrypoint"][1:] or None
    crafted = with_config(repo.store, digest, {"Entrypoint": base_entry})
    (found,) = _problems(repo, crafted)
    assert found.startswith(f"image config Entrypoint {base_entry!r} differs from the one "
                            "bake writes (the start-up wrapper in front of the base's)")


def test_identity_record_must_be_the_recorded_one(tmp_path: Path) -> None:
    repo, digest = _baked(tmp_path)
    rec = json.loads(next((repo.root / "manifests" / "images" / "offline").glob(
        f"{digest.hex}.json")).read_text())
    assert rec["identity_sha256"]
    p = next((repo.root / "manifests" / "images" / "offline").glob(f"{digest.hex}.json"))
    p.write_text(json.dumps({**rec, "identity_sha256": "0" * 64}))
    res = verify_image(repo.pipeline, digest, repo.store, patched=repo.patched)
    assert any("is not the identity record the image record names" in x for x in res.problems)


def test_ld_library_path_only_as_the_base_sets_it(tmp_path: Path) -> None:
    repo, digest = _baked(tmp_path)
    manifest = json.loads(repo.store.read_blob(digest))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    crafted = with_config(repo.store, digest,
                          {"Env": [*config["config"]["Env"], "LD_LIBRARY_PATH=/opt/evil"]})
    (found,) = _problems(repo, crafted)
    assert found.startswith("image config Env LD_LIBRARY_PATH='/opt/evil' differs from the base")


def test_hooks_of_another_python_version_are_seen(tmp_path: Path) -> None:
    repo, digest = _baked(tmp_path)
    crafted = with_layer(repo.store, digest, layer([
        ("usr/lib/python3.11/site-packages/zz.pth", b"import evil\n")]))
    found = _problems(repo, crafted)
    assert found[0].startswith("/usr/lib/python3.11/site-packages/zz.pth: a .pth file")


def test_the_entrypoint_wrapper_must_be_this_tools(tmp_path: Path) -> None:
    repo, digest = _baked(tmp_path)
    manifest = json.loads(repo.store.read_blob(digest))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    assert config["config"]["Entrypoint"][0] == "/opt/patchbake/entrypoint.sh"
    crafted = with_layer(repo.store, digest, layer([
        ("opt/patchbake/entrypoint.sh", b"#!/bin/sh\npython3 -c 'import evil'\nexec \"$@\"\n")]))
    found = _problems(repo, crafted)
    assert any(p.startswith("/opt/patchbake/entrypoint.sh (the image's entrypoint) is not "
                            "the start-up wrapper") for p in found)


def test_a_directory_above_the_base_in_vllm_is_a_failure(tmp_path: Path) -> None:
    import io
    import tarfile

    repo, digest = _baked(tmp_path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        ti = tarfile.TarInfo(f"{sp}/vllm/sampling_params.py")  # a module becomes a dir
        ti.type, ti.mode = tarfile.DIRTYPE, 0o755
        tf.addfile(ti)
    res = _verify(repo, with_layer(repo.store, digest, buf.getvalue()))
    assert ("vllm/sampling_params.py", "layer 3 (above the base) adds a directory outside "
            "the baked set") in [(m["path"], m["why"]) for m in res.mismatched]


@pytest.mark.parametrize("name, value", [
    ("PATH", "/opt/patchbake/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("PATCHBAKE_PYTHON", "/bin/true"),
])
def test_environment_that_picks_another_interpreter_fails(tmp_path: Path, name: str,
                                                          value: str) -> None:
    """/opt/patchbake/ may be written above the base; a PATH that puts a python3 there
    first (or PATCHBAKE_PYTHON naming a stand-in for the start-up check's interpreter)
    runs something else than the verified tree at start."""
    repo, digest = _baked(tmp_path)
    manifest = json.loads(repo.store.read_blob(digest))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    env = [e for e in config["config"]["Env"] if not e.startswith(f"{name}=")]
    crafted = with_layer(repo.store, digest, layer([("opt/patchbake/bin/python3", EVIL)]),
                         {"Env": [*env, f"{name}={value}"]})
    found = _problems(repo, crafted)
    assert any(p.startswith(f"image config Env {name}=") for p in found), found


def test_environment_naming_a_variable_twice_fails(tmp_path: Path) -> None:
    """env_of keeps the last value; the container's getenv() (the dynamic loader's and
    CPython's start-up reads) may see the first: the base's value last hides the other."""
    repo, digest = _baked(tmp_path)
    manifest = json.loads(repo.store.read_blob(digest))
    config = json.loads(repo.store.read_blob(Digest.parse(manifest["config"]["digest"])))
    path = next(e for e in config["config"]["Env"] if e.startswith("PATH="))
    crafted = with_config(repo.store, digest, {"Env": ["PATH=/opt/patchbake/bin", path]})
    found = _problems(repo, crafted)
    assert found == [f"image config Env sets PATH twice ('/opt/patchbake/bin', then "
                     f"{path[5:]!r}): getenv takes the first, Python's os.environ and the "
                     "shells the last"], found


def _identity_of(repo: Repo, digest: Digest) -> dict[str, object]:
    res = _verify(repo, digest)
    assert res.ok and res.identity
    return dict(res.identity)


def test_identity_fields_are_bound_without_an_image_record(tmp_path: Path) -> None:
    """An unrecorded image (verified with a named definition) whose identity record widens
    the in-image allow-list and names another lineage: each field is a finding."""
    repo, digest = _baked(tmp_path)
    ident = _identity_of(repo, digest)
    forged = {**ident, "lineage": "v9.9.9",
              "startup_allow": [{"path": f"/{sp}/evil.pth", "sha256": "0" * 64}]}
    crafted = with_layer(repo.store, digest, layer([
        ("opt/patchbake/identity.json", json.dumps(forged).encode())]))
    for rec in (repo.root / "manifests" / "images" / "offline").glob("*.json"):
        rec.unlink()  # no record names anything: only the definition says what is right
    found = _problems(repo, crafted)
    assert any(p.startswith("/opt/patchbake/identity.json says lineage = \"v9.9.9\"")
               for p in found), found
    assert any(p.startswith("/opt/patchbake/identity.json says startup_allow = ")
               for p in found), found


def test_tree_manifest_must_list_what_the_engine_unpacks(tmp_path: Path) -> None:
    """A tree manifest edited in a layer above the base (say, to list foreign code's hash)
    would let the in-image self-check pass: the host refuses it."""
    repo, digest = _baked(tmp_path)
    crafted = with_layer(repo.store, digest, layer([
        ("opt/patchbake/tree.json", b'{"format": 1, "files": []}\n')]))
    found = _problems(repo, crafted)
    assert any(p.startswith("/opt/patchbake/tree.json is sha256:") for p in found), found
    assert any("does not list the vllm/ tree the image unpacks to" in p for p in found), found
