"""External programs envguard runs: where to find them."""

from __future__ import annotations

import shutil

from envguard.errors import UsageError


def find_uv() -> str:
    """The uv binary shipped with the `uv` package, else the first `uv` on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if found is None:
        raise UsageError("uv not found", hint="pip install uv, or put uv on PATH")
    return found
