"""The user's cache and config directories (the store's default root, the signing key's).

On Linux these follow the XDG base directory specification directly: ``$XDG_CACHE_HOME``
(``$XDG_CONFIG_HOME``) when it is set to an absolute path, else ``~/.cache``
(``~/.config``), then ``patchbake``. That is what platformdirs answers there for a user
with those variables unset or absolute, without its import on every short command's
start-up (tests/unit/test_userdirs.py holds the two together). Other systems ask
platformdirs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

APP = "patchbake"
_XDG = {"cache": ("XDG_CACHE_HOME", "~/.cache"), "config": ("XDG_CONFIG_HOME", "~/.config")}


def _xdg(kind: str) -> Path:
    var, fallback = _XDG[kind]
    base = os.environ.get(var, "").strip()
    if not os.path.isabs(base):  # unset, empty or relative: the spec says ignore it
        base = os.path.expanduser(fallback)
    return Path(base) / APP


def user_cache_dir() -> Path:
    if sys.platform.startswith("linux"):
        return _xdg("cache")
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP))


def user_config_dir() -> Path:
    if sys.platform.startswith("linux"):
        return _xdg("config")
    import platformdirs

    return Path(platformdirs.user_config_dir(APP))
