"""Errors the CLI turns into a one-line message and an exit code; anything else is a bug."""

from __future__ import annotations


class EnvguardError(Exception):
    """A failure the user can act on: a message, an optional hint, and an exit code."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(EnvguardError):
    """Bad usage or bad input: exit 2."""


class SnapshotError(EnvguardError):
    """A snapshot file that is missing, corrupt or of an unknown schema: exit 2."""


class ProbeError(EnvguardError):
    """The target interpreter could not be measured: exit 2."""


class ActionError(EnvguardError):
    """An action (rebuild, fleet capture) that failed part-way: exit 1."""

    exit_code = 1
