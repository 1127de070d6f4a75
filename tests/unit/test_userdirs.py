"""userdirs answers what platformdirs answers on Linux, without importing it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs
import pytest
from patchbake import userdirs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the XDG rule is the Linux path; others ask platformdirs")


@pytest.mark.parametrize("value", [None, "", "   ", "/srv/xdg", "relative/dir", "/srv/x/",
                                   " /srv/lead", "/srv/trail "])
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
    from patchbake.config.signing import default_key_dir
    from patchbake.store import default_root

    monkeypatch.delenv("PATCHBAKE_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "k"))
    assert default_root() == tmp_path / "c" / "patchbake"
    assert default_key_dir() == tmp_path / "k" / "patchbake" / "keys"


def test_no_platformdirs_import_on_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    from patchbake.config.signing import default_key_dir
    from patchbake.store import default_root

    monkeypatch.delenv("PATCHBAKE_HOME", raising=False)
    for name in [m for m in sys.modules if m.split(".")[0] == "platformdirs"]:
        monkeypatch.delitem(sys.modules, name)
    default_root()
    default_key_dir()
    assert "platformdirs" not in sys.modules


@pytest.mark.parametrize("home", [None, "", "relhome"])
def test_an_unusable_home_falls_back_to_the_passwd_entry(monkeypatch: pytest.MonkeyPatch,
                                                         home: str | None) -> None:
    import pwd

    for var in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    if home is None:
        monkeypatch.delenv("HOME", raising=False)
    else:
        monkeypatch.setenv("HOME", home)
    want = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert userdirs.user_cache_dir() == want / ".cache" / "patchbake"
    assert userdirs.user_config_dir() == want / ".config" / "patchbake"


def test_no_home_at_all_is_a_store_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd

    from patchbake.errors import StoreError

    def no_entry(_uid: int) -> None:
        raise KeyError("no such uid")

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    with pytest.raises(StoreError, match="cannot tell the home directory") as err:
        userdirs.user_cache_dir()
    assert err.value.exit_code == 13 and "PATCHBAKE_HOME" in (err.value.hint or "")


def test_a_store_root_of_an_unknown_user_is_a_store_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from patchbake.errors import StoreError
    from patchbake.store import default_root

    monkeypatch.setenv("PATCHBAKE_HOME", "~no-such-user-patchbake/x")
    with pytest.raises(StoreError, match="no such user's home"):
        default_root()
