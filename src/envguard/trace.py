"""`envguard -v`: what envguard runs (the probe's argv, uv's argv) and how long it took, on
stderr, secrets redacted. Off unless the CLI turns it on; the library never prints."""

from __future__ import annotations

import sys
import time

_ON: list[bool] = []


def enable() -> None:
    _ON[:] = [True]


def enabled() -> bool:
    return bool(_ON)


def say(text: str) -> None:
    """One line on stderr when -v is on."""
    if _ON:
        from envguard.reading import escaped_line
        from envguard.redact import redact_text

        sys.stderr.write(f"envguard: {redact_text(escaped_line(text))}\n")


def command(what: str, argv: list[str] | tuple[str, ...]) -> float:
    """Say that ``argv`` runs now; returns the start time for done()."""
    if _ON:
        import shlex

        say(f"{what}: {shlex.join(argv)}")
    return time.monotonic()


def done(what: str, started: float) -> None:
    if _ON:
        say(f"{what}: {time.monotonic() - started:.2f}s")
