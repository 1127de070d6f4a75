""""Did you mean" for image names the commands take (definitions and store names)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..cli import Ctx
from ..errors import ConfigError, ImageError
from ..oci import layout


def known_image_names(ctx: Ctx) -> list[str]:
    """Definition names from pipeline.yaml and image names in the store's index.json."""
    names: set[str] = set()
    try:
        names.update(ctx.pipeline.images)
    except (ConfigError, OSError):
        names.update(())  # no pipeline: suggest from the store alone
    try:
        names.update(layout.refs(ctx.store))
    except Exception:  # noqa: BLE001, S110 -- a suggestion must never hide the real error
        pass
    return sorted(names)


def suggestion(ctx: Ctx, ref: str) -> str | None:
    name = ref.partition("@")[0]
    if not name or name.startswith("sha256:"):
        return None
    known = known_image_names(ctx)
    if name in known:
        return None
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return close[0] if close else None


_BARE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def require_known(ctx: Ctx, ref: str) -> None:
    """A bare name (no digest, path, registry or docker: prefix) that is neither a definition
    nor a store name is refused before any work (verify would fetch the upstream first)."""
    if not _BARE_NAME.fullmatch(ref) or Path(ref).exists():
        return
    known = known_image_names(ctx)
    if ref in known:
        return
    close = difflib.get_close_matches(ref, known, n=1, cutoff=0.6)
    raise ImageError(f"cannot resolve image reference '{ref}': no image definition or store "
                     "image has that name",
                     hint=f"did you mean '{close[0]}'?" if close else
                     "`patchbake image ls` lists definitions and store names")


@contextmanager
def did_you_mean(ctx: Ctx, ref: str | None, *, early: bool = False) -> Iterator[None]:
    """An image error about a mistyped name gets the close name as its hint. ``early``:
    refuse an unknown bare name before the work starts (for commands that fetch first)."""
    if ref and early:
        require_known(ctx, ref)
    try:
        yield
    except (ImageError, ConfigError) as exc:
        close = suggestion(ctx, ref) if ref and "did you mean" not in exc.message else None
        if close:
            exc.hint = f"did you mean '{close}'?"
        raise
