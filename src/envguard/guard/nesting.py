"""A guard never runs inside a guard.

`envguard protect` puts a uv shim and a pip hook in the venv that hand installs to `envguard
guard`; the guard itself runs the installer (its dry run, then the install). Were those runs
handed back to the guard, each would start another guard, without end. So every child the
guard starts carries TOKEN, ``pid:nonce``: the guard wrote the nonce's file, holding its
pid, into a folder of the user's own, and removes it as it exits. protect's shim and hook
run the real installer at once when the token's file holds that pid and that process runs
above them: a token exported by hand, or one a guard that has ended gave, opens nothing.
That is the mechanism, not a list of commands.

Every child carries MARKER too (how many guards it runs under; the hooks of earlier
envguards read it). Should a guard start under a guard anyway (the marker dropped by a
program in between, or forged), it refuses in one line (exit 2) instead of nesting. Where
the marker is lost, the process tree says it (Linux /proc): a guard counts the `envguard
guard` processes above it.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

from envguard.errors import UsageError
from envguard.guard import hook
from envguard.lifecycle import parent_of

# How many guards a process runs under (the hooks before TOKEN read it).
MARKER = "ENVGUARD_GUARD_DEPTH"
# What hooks written by envguard before MARKER let through (when it names their venv).
LEGACY_MARKER = "ENVGUARD_GUARDING"
# Guards in one chain of processes, at most.
MOST = 1
# The guard's token: which guard (its pid and nonce), checked by the hook and the shim.
TOKEN = hook.TOKEN
# Processes above this one looked at, at most: a chain deeper than that is no shell's.
_ANCESTORS = 64
# A Python interpreter by its program name (python3.12, pypy3).
_PYTHON = re.compile(rb"^(python|pypy)[0-9.]*$")
# This process's token (pid:nonce), once its file is written.
_token: list[str] = []


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
    env[TOKEN] = token()
    if venv is not None:
        env[LEGACY_MARKER] = str(venv)
    return env


def token() -> str:
    """This guard's token, ``pid:nonce``: the nonce's file (in the user's own folder,
    holding the pid) written on first use and removed when this process exits."""
    import atexit
    import secrets
    import stat

    pid = str(os.getpid())
    if _token and _token[0].startswith(pid + ":"):
        return _token[0]
    folder = hook.token_folder()
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise OSError("not a folder of this user's alone")
        nonce = secrets.token_hex(16)
        path = os.path.join(folder, f"guard-{nonce}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, pid.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise UsageError(
            f"{folder}: envguard guard cannot keep its nonce file there ({exc})"
        ) from None
    atexit.register(_remove, path)
    _token[:] = [f"{pid}:{nonce}"]
    return _token[0]


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


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
    """``argv`` runs `envguard guard` itself: `envguard [options] guard ...`, or a Python
    running envguard (`python [options] -m envguard guard ...`, `python [options]
    .../envguard guard ...`: what the kernel makes of the console script). A program that
    only carries those words (`timeout 120 envguard guard`, `sudo`, `flock`, `uv run`)
    starts a guard; it is not one, and counting it refused the guard it started."""
    if not argv:
        return False
    program = os.path.basename(argv[0])
    if program == b"envguard":
        return _runs_guard(argv[1:])
    if not _PYTHON.match(program):
        return False
    n = 1
    while n < len(argv):
        word = argv[n]
        if word == b"--" or word == b"-" or not word.startswith(b"-"):
            at = n + 1 if word == b"--" else n  # the script, then its arguments
            script = argv[at] if at < len(argv) else b""
            return os.path.basename(script) == b"envguard" and _runs_guard(argv[at + 1 :])
        if word.startswith(b"--"):  # --check-hash-based-pycs takes a value
            n += 2 if word == b"--check-hash-based-pycs" else 1
            continue
        # Short options, combined as Python allows (`-I`, `-Im envguard`, `-Wignore`).
        for k, letter in enumerate(word[1:].decode("latin-1"), start=2):
            if letter == "c":
                return False  # code, not envguard's entry point
            if letter == "m":
                module = word[k:] or (argv[n + 1] if n + 1 < len(argv) else b"")
                rest = argv[n + 1 :] if word[k:] else argv[n + 2 :]
                return module in (b"envguard", b"envguard.__main__") and _runs_guard(rest)
            if letter in "XW":
                n += 0 if word[k:] else 1  # its value is the next word
                break
        n += 1
    return False


def _runs_guard(args: list[bytes]) -> bool:
    """envguard's arguments ``args`` name the guard command (options before it skipped)."""
    following = [w for w in args if w and not w.startswith(b"-")]
    return following[:1] == [b"guard"]
