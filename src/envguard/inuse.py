"""Who runs from a venv: the processes a change to it would pull modules from under.

A training job imports lazily: swap or sync its venv while it runs and its next import
finds other files, or none (``ModuleNotFoundError`` mid-run; openvax/mhcflurry#413,
sgl-project/sglang#34231). So guard, undo, restore and rebuild first look for processes
that use the venv and refuse to change it while they run (unless forced, or until they
end, within a wait).

A process uses the venv when any of these lies inside it: its program (``/proc/PID/exe``,
a venv made with ``--copies``), its working directory, a file it has mapped (an extension
module, a library from site-packages), or the interpreter it was started as (``argv[0]``,
resolved against its working directory, or along its own PATH for a bare ``python``: how
Python itself finds ``sys.prefix`` through a venv's ``bin/python`` link, which
``/proc/PID/exe`` shows resolved to the base interpreter). This envguard, the processes it
started and those that started it (the shell, or the pip a protected venv routes through
guard) are not counted.

Linux only (``/proc``); elsewhere nothing is found. The scan is bounded (processes, bytes
read per process, seconds in all) and passes over processes that end or cannot be read
meanwhile. A command line is shown redacted and cut; nothing of a process's environment
is shown or kept.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from envguard.errors import ActionError, UsageError
from envguard.redact import redact_argv

# Bounds of one look: Linux's default pid_max is 32768 (4M at most, rarely reached by a
# node's live processes); a CUDA torch job's maps are a few MB; a command line or an
# environment past 1 MiB is cut.
MAX_PROCESSES, SCAN_SECONDS = 65536, 5.0
MAPS_CAP, SMALL_CAP = 8 << 20, 1 << 20
MAX_WAIT = 86400.0  # --wait: a day at most
COMMAND_WIDTH, SHOWN = 100, 5  # each command cut to this width; at most this many listed


@dataclass(frozen=True)
class InUse:
    """What to do when processes use the venv: refuse (default), wait up to ``wait``
    seconds for them to end, or go on anyway (``force``)."""

    force: bool = False
    wait: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.wait) and 0 <= self.wait <= MAX_WAIT):
            raise UsageError(f"--wait {self.wait}: give seconds from 0 to {MAX_WAIT:g}")


REFUSE = InUse()  # the default: refuse while any process runs from the venv


@dataclass(frozen=True)
class User:
    """A process that uses the venv: its pid, its command line (redacted, cut) and how."""

    pid: int
    command: str
    how: str


def users(venv: Path, *, proc: str = "/proc") -> list[User]:
    """The processes that use ``venv`` (see the module's docstring), by pid."""
    roots = {os.path.abspath(venv), os.path.realpath(venv)}
    parents = _parents(proc)
    if not parents:
        return []
    mine = _family(os.getpid(), parents)
    deadline = time.monotonic() + SCAN_SECONDS
    found = []
    for pid in sorted(parents):
        if pid in mine:
            continue
        if time.monotonic() > deadline:
            break  # bounded: a machine with a huge process table is scanned in part
        how = _how(f"{proc}/{pid}", roots)
        if how is not None:
            found.append(User(pid=pid, command=_command(f"{proc}/{pid}"), how=how))
    return found


def check(venv: Path, policy: InUse, *, action: str) -> None:
    """Return once no process uses ``venv`` (waiting up to ``policy.wait`` seconds for
    them to end); ActionError naming them otherwise. ``policy.force``: no look."""
    if policy.force or not venv.exists():
        return
    deadline = time.monotonic() + policy.wait
    while True:
        found = users(venv)
        if not found:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(0.5, left))
    # The command last, then a space: nothing glued to a redacted value (the CLI redacts
    # the line again, and a value runs to the next space).
    listed = " | ".join(f"pid {u.pid} ({u.how}): {u.command}" for u in found[:SHOWN])
    more = f" | and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    count = f"{len(found)} process{'es' if len(found) != 1 else ''}"
    waited = f" (waited {policy.wait:g} s)" if policy.wait else ""
    raise ActionError(
        f"{venv}: in use by {count}{waited}: {listed}{more}",
        hint=f"{action} would change the venv under them: let them end (--wait SECONDS),"
        " or --force to change it anyway",
    )


def _parents(proc: str) -> dict[int, int]:
    """{pid: parent pid} of the processes in ``proc``, at most MAX_PROCESSES."""
    try:
        names = [n for n in os.listdir(proc) if n.isdigit()][:MAX_PROCESSES]
    except OSError:
        return {}
    out = {}
    for name in names:
        stat = _read(f"{proc}/{name}/stat", 4096)
        if stat is None:
            continue  # ended meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 1 and fields[1].isdigit():
            out[int(name)] = int(fields[1])
    return out


def _family(me: int, parents: dict[int, int]) -> set[int]:
    """``me``, the processes that started it, and every process it started."""
    ancestors: set[int] = set()
    pid = parents.get(me)
    while pid is not None and pid > 0 and pid not in ancestors and len(ancestors) < 4096:
        ancestors.add(pid)
        pid = parents.get(pid)
    return {me} | ancestors | {pid for pid in parents if _below(pid, me, parents)}


def _below(pid: int, me: int, parents: dict[int, int]) -> bool:
    """Whether ``pid`` descends from ``me``."""
    for _ in range(4096):
        if pid == me:
            return True
        up = parents.get(pid)
        if up is None or up <= 0:
            return False
        pid = up
    return False


def _inside(path: str | None, roots: set[str]) -> bool:
    if not path:
        return False
    path = path.removesuffix(" (deleted)")
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _how(where: str, roots: set[str]) -> str | None:
    """How the process at ``where`` (``/proc/PID``) uses the venv, or None."""
    exe, cwd = _link(f"{where}/exe"), _link(f"{where}/cwd")
    if _inside(exe, roots):
        return "its program is in the venv"
    argv = _argv(where)
    if argv and _inside(_started_as(argv[0], cwd, where), roots):
        return "started as the venv's interpreter"
    if len(argv) > 1 and "/" in argv[1] and _inside(_absolute(argv[1], cwd), roots):
        return "runs a script of the venv"
    maps = _read(f"{where}/maps", MAPS_CAP)
    for line in (maps or b"").decode("utf-8", "surrogateescape").splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and _inside(parts[5], roots):
            return "has a file of the venv loaded"
    if _inside(cwd, roots):
        return "works in the venv's folder"
    return None


def _started_as(program: str, cwd: str | None, where: str) -> str | None:
    """The path ``program`` (argv[0]) named when the process started: as written, against
    its working directory, or the first match along its own PATH."""
    if "/" in program:
        return _absolute(program, cwd)
    if not program.startswith("python"):
        return None  # only an interpreter's argv[0] decides its prefix
    env = _read(f"{where}/environ", SMALL_CAP) or b""
    for entry in env.split(b"\0"):
        if entry.startswith(b"PATH="):
            for folder in entry[5:].decode("utf-8", "surrogateescape").split(":")[:64]:
                candidate = os.path.join(folder, program)
                if os.path.isabs(folder) and os.access(candidate, os.X_OK):
                    return os.path.normpath(candidate)
            break
    return None


def _absolute(path: str, cwd: str | None) -> str | None:
    if os.path.isabs(path):
        return os.path.normpath(path)
    return os.path.normpath(os.path.join(cwd, path)) if cwd else None


def _argv(where: str) -> list[str]:
    raw = _read(f"{where}/cmdline", SMALL_CAP) or b""
    return [a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0")[:4096] if a]


def _command(where: str) -> str:
    """The command line, redacted (redact.redact_argv), one printable line, cut."""
    argv = _argv(where) or ["?"]
    text = " ".join(redact_argv(argv))
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= COMMAND_WIDTH else text[: COMMAND_WIDTH - 3] + "..."


def _link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _read(path: str, cap: int) -> bytes | None:
    """At most ``cap`` bytes of a /proc file; None when it cannot be read (ended, not ours)."""
    try:
        with open(path, "rb") as fh:  # buffered: read() gathers /proc's page-sized chunks
            return fh.read(cap)
    except OSError:
        return None
