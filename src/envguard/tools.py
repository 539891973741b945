"""External programs envguard runs: where to find them."""

from __future__ import annotations

import os
import shlex
import shutil

from envguard.errors import UsageError


def find_uv() -> str:
    """$ENVGUARD_UV, else the uv binary shipped with the `uv` package, else `uv` on PATH."""
    override = os.environ.get("ENVGUARD_UV")
    if override:
        return override
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if found is None:
        raise UsageError("uv not found", hint="pip install uv, or put uv on PATH")
    return found


def split_command(text: str, *, option: str) -> tuple[str, ...]:
    """A user's command string as argv (shlex rules); it never runs through a shell."""
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise UsageError(f"{option} {text!r}: cannot split it ({exc})") from None
    if not argv:
        raise UsageError(f"{option}: an empty command")
    return argv
