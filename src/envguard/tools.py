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


# Variables envguard set in its own process (not the user's): left out of user_environ().
_OWN: set[str] = set()


def own_variable(name: str, value: str) -> None:
    """Set ``name`` for envguard's own process unless the user already set it."""
    if name not in os.environ:
        os.environ[name] = value
        _OWN.add(name)


def user_environ() -> dict[str, str]:
    """The environment as the user gave it: for commands run on the user's behalf."""
    return {k: v for k, v in os.environ.items() if k not in _OWN}
