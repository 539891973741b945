"""A guard never runs inside a guard.

`envguard protect` puts a uv shim and a pip hook in the venv that hand installs to `envguard
guard`; the guard itself runs the installer (its dry run, then the install). Were those runs
handed back to the guard, each would start another guard, without end. So every child the
guard starts carries MARKER (how many guards it runs under), and protect's shim and hook run
the real installer at once when it is set: that is the mechanism, not a list of commands.

Should a guard start under a guard anyway (the marker dropped by a program in between, or
forged), it refuses in one line (exit 2) instead of nesting. The marker says how deep the
guard is; where the marker is lost, the process tree says it (Linux /proc): a guard counts
the `envguard guard` processes above it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from envguard.errors import UsageError
from envguard.lifecycle import parent_of

# The shim (protect.py) and the hook (hook.py) spell it out: they run without envguard.
MARKER = "ENVGUARD_GUARD_DEPTH"
# What hooks written by envguard before MARKER let through (when it names their venv).
LEGACY_MARKER = "ENVGUARD_GUARDING"
# Guards in one chain of processes, at most.
MOST = 1
# Processes above this one looked at, at most: a chain deeper than that is no shell's.
_ANCESTORS = 64


def inherited(environ: Mapping[str, str]) -> int:
    """The depth ``environ``'s MARKER says (0 when unset or not a count)."""
    value = environ.get(MARKER, "").strip()
    return int(value) if value.isascii() and value.isdigit() else 0


def depth() -> int:
    """How many guards this process runs under: the marker's count, or the `envguard
    guard` processes above it, whichever is more."""
    return max(inherited(os.environ), guards_above(os.getppid()))


def check() -> None:
    """UsageError (one line, exit 2) when this guard would run under another guard."""
    found = depth()
    if found >= MOST:
        raise UsageError(
            f"envguard guard refused: it would run inside another guard (depth {found + 1},"
            f" at most {MOST}); a guard runs its own installer unguarded; unset {MARKER}"
            " if no guard is running"
        )


def marked(env: dict[str, str], *, venv: Path | None) -> dict[str, str]:
    """``env`` marked for a child of the guard (of ``venv``): protect's shim and hook let
    it through."""
    env[MARKER] = str(inherited(os.environ) + 1)
    if venv is not None:
        env[LEGACY_MARKER] = str(venv)
    return env


def guards_above(pid: int) -> int:
    """The `envguard guard` processes among ``pid`` and those above it (0 without /proc)."""
    count = 0
    for _ in range(_ANCESTORS):
        parent = parent_of(pid) if pid > 1 else None
        if parent is None:
            break
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                count += is_guard(fh.read(1 << 16).split(b"\0"))
        except OSError:
            break
        pid = parent
    return count


def is_guard(argv: list[bytes]) -> bool:
    """``argv`` runs `envguard guard` (`envguard [options] guard ...`, `python -m envguard
    guard ...`)."""
    for n, word in enumerate(argv):
        if os.path.basename(word) == b"envguard":
            following = [w for w in argv[n + 1 :] if w and not w.startswith(b"-")]
            return following[:1] == [b"guard"]
    return False
