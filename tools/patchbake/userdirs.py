"""The user's cache and config directories (the store's default root, the signing key's).

On Linux these follow the XDG base directory specification directly: ``$XDG_CACHE_HOME``
(``$XDG_CONFIG_HOME``) when it is set to an absolute path, else ``~/.cache``
(``~/.config``), then ``patchbake``; ``~`` is ``$HOME`` when absolute, else the passwd
entry's home, and a home that is neither is a StoreError (exit 13) that says what to set.
That is what platformdirs answers there (tests/unit/test_userdirs.py holds the two
together), and the GPU suite image (the H200 box) lacks platformdirs. Other systems ask it.
"""

from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path

from .errors import StoreError

APP = "patchbake"
_XDG = {"cache": ("XDG_CACHE_HOME", ".cache"), "config": ("XDG_CONFIG_HOME", ".config")}


def _home() -> str:
    """``$HOME`` when it is absolute, else the user's passwd entry (as platformdirs does);
    never a relative path, which would put the store under the working directory."""
    home = os.environ.get("HOME", "")
    if os.path.isabs(home):
        return home
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        home = ""
    if not os.path.isabs(home):
        raise StoreError("cannot tell the home directory (HOME is unset or relative and "
                         "the user has no passwd entry)",
                         hint="set PATCHBAKE_HOME (the store) or an absolute HOME, "
                              "XDG_CACHE_HOME or XDG_CONFIG_HOME")
    return home


def _xdg(kind: str) -> Path:
    var, fallback = _XDG[kind]
    base = os.environ.get(var, "")
    if not os.path.isabs(base):  # unset, empty or relative: the spec says ignore it
        base = os.path.join(_home().rstrip("/") or "/", fallback)
    return Path(base) / APP


def user_cache_dir() -> Path:
    if sys.platform.startswith("linux"):
        return _xdg("cache")
    import platformdirs  # off Linux only: the GPU suite image lacks it

    return Path(platformdirs.user_cache_dir(APP))


def user_config_dir() -> Path:
    if sys.platform.startswith("linux"):
        return _xdg("config")
    import platformdirs  # off Linux only: the GPU suite image lacks it

    return Path(platformdirs.user_config_dir(APP))
