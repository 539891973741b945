"""Errors the CLI turns into a one-line message and an exit code; anything else is a bug."""

from __future__ import annotations


class EnvguardError(Exception):
    """A failure the user can act on: a message, an optional hint, and an exit code."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def field_path(loc: tuple[int | str, ...]) -> str:
    """``packages.0.version`` for a validation error's location, always one printable line:
    keys in untrusted input may hold newlines or escape codes."""
    parts = [p if isinstance(p, str) and p.isprintable() else repr(p) for p in loc]
    return ".".join(str(p) for p in parts) or "top level"


class UsageError(EnvguardError):
    """Bad usage or bad input: exit 2."""


class SnapshotError(EnvguardError):
    """A snapshot file that is missing, corrupt or of an unknown schema: exit 2."""


class ProbeError(EnvguardError):
    """The target interpreter could not be measured: exit 2."""


class ActionError(EnvguardError):
    """An action (rebuild, fleet capture) that failed part-way: exit 1."""

    exit_code = 1


class StoppedError(ActionError):
    """An action a signal stopped that says itself where it stopped (a rebuild): exit
    128 + N. Not a failed item: whatever goes on past a failure stops for this one."""

    def __init__(self, message: str, hint: str | None = None, *, signum: int) -> None:
        super().__init__(message, hint)
        self.signum = signum
        self.exit_code = 128 + signum
