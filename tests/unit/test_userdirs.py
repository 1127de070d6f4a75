"""userdirs answers what platformdirs answers on Linux, without importing it."""

from __future__ import annotations

import sys
from pathlib import Path

import platformdirs
import pytest

from patchbake import userdirs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the XDG rule is the Linux path; others ask platformdirs")


@pytest.mark.parametrize("value", [None, "", "   ", "/srv/xdg", "relative/dir", "/srv/x/"])
def test_same_as_platformdirs(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    for var in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    assert userdirs.user_cache_dir() == Path(platformdirs.user_cache_dir("patchbake"))
    assert userdirs.user_config_dir() == Path(platformdirs.user_config_dir("patchbake"))


def test_the_store_root_and_the_key_dir_follow_it(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    from patchbake.evidence.settings import default_key_dir
    from patchbake.store import default_root

    monkeypatch.delenv("PATCHBAKE_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "k"))
    assert default_root() == tmp_path / "c" / "patchbake"
    assert default_key_dir() == tmp_path / "k" / "patchbake" / "keys"


def test_no_platformdirs_import_on_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    from patchbake.evidence.settings import default_key_dir
    from patchbake.store import default_root

    monkeypatch.delenv("PATCHBAKE_HOME", raising=False)
    for name in [m for m in sys.modules if m.split(".")[0] == "platformdirs"]:
        monkeypatch.delitem(sys.modules, name)
    default_root()
    default_key_dir()
    assert "platformdirs" not in sys.modules
