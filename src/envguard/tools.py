"""External programs envguard runs, where to find them, and the environment they are
given: the user's (envguard's own variables left out), and what the process changed in
it since it started (changed_in_process)."""

from __future__ import annotations

import os
import shlex

from envguard.errors import UsageError


def find_uv() -> str:
    """$ENVGUARD_UV, else the uv binary shipped with the `uv` package, else `uv` on PATH;
    never the uv shim of a venv `envguard protect` guards (it would start the guard)."""
    override = os.environ.get("ENVGUARD_UV")
    if override:
        return override
    try:
        from uv import find_uv_bin

        shipped = find_uv_bin()
        if not is_protect_shim(shipped):
            return shipped
    except (ImportError, FileNotFoundError):
        pass
    found = which("uv")
    if found is None:
        raise UsageError("uv not found", hint="pip install uv, or put uv on PATH")
    return found


# How protect's uv shim begins (guard/protect.py writes it): its docstring's first words.
SHIM_MARK = b"envguard protect"


def is_protect_shim(path: str) -> bool:
    """``path`` is the uv shim `envguard protect` wrote into a venv: a script whose
    opening says so (uv itself is a binary)."""
    try:
        with open(path, "rb") as fh:
            return SHIM_MARK in fh.read(400)
    except OSError:
        return False


def which(name: str, path: str | None = None) -> str | None:
    """``name`` as shutil.which finds it on ``path`` (default $PATH), past protect's shims."""
    import shutil  # here: split_command is on the way to the early probe, which needs none

    if os.path.dirname(name):
        found = shutil.which(name)
        return found if found is not None and not is_protect_shim(found) else None
    folders = (os.environ.get("PATH", os.defpath) if path is None else path).split(os.pathsep)
    for folder in folders[:_MOST_FOLDERS]:
        found = shutil.which(name, path=folder) if folder else None
        if found is not None and not is_protect_shim(found):
            return found
    return None


# PATH entries looked at, at most.
_MOST_FOLDERS = 256


# The first uv with every call envguard makes as envguard reads it: `uv export --format
# pylock.toml` and `uv pip compile --format pylock.toml` (PEP 751) arrived in 0.6.15, but
# until 0.13 a wheel from a flat or local index was exported with `hashes = {}`, which PEP
# 751 (and packaging) refuse: the gate failed on exactly the air-gapped layouts.
UV_MINIMUM = (0, 13, 0)
_UV_CHECKED: dict[str, tuple[int, ...]] = {}


def uv_version(uv: str) -> tuple[int, ...]:
    """``uv --version`` as a tuple, asked once per binary; UsageError when it cannot run."""
    import re
    import subprocess

    if uv not in _UV_CHECKED:
        try:
            out = subprocess.run(
                [uv, "--version"], capture_output=True, text=True, timeout=30, check=False
            ).stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"{uv}: cannot run uv ({exc})") from None
        match = re.match(r"uv (\d+)\.(\d+)\.(\d+)", out)
        if match is None:
            raise UsageError(f"{uv}: not uv (its --version does not say uv X.Y.Z)")
        _UV_CHECKED[uv] = tuple(int(g) for g in match.groups())
    return _UV_CHECKED[uv]


def find_modern_uv() -> str:
    """find_uv(), refused with one line naming the minimum when it is older than that."""
    uv = find_uv()
    found = uv_version(uv)
    if found < UV_MINIMUM:
        minimum = ".".join(map(str, UV_MINIMUM))
        raise UsageError(
            f"uv {'.'.join(map(str, found))} at {uv} is too old: envguard needs uv >= {minimum}",
            hint="pip install -U uv (or set ENVGUARD_UV to a newer uv)",
        )
    return uv


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


# Where Linux keeps the environment a process was started with (exec's copy; os.environ is
# that as the program has changed it since).
LAUNCH_ENVIRON = "/proc/self/environ"


# What starts a torchrun worker: the elastic agent, which sets TORCHELASTIC_*, RANK,
# OMP_NUM_THREADS=1 and the like in its own process first.
_TORCHRUN = (b"torchrun", b"torch.distributed.run", b"torch.distributed.launch")


def _start_of_run() -> str:
    """Where this run's start is kept: this process's own, or, in a torchrun worker, its
    agent's (the parent, started from the user's shell as a relaunch will be: what the
    agent set for its workers is the run's own doing, as torch.compile's is)."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return LAUNCH_ENVIRON
    parent = f"/proc/{os.getppid()}"
    try:
        with open(parent + "/cmdline", "rb") as f:
            argv = f.read(4096).split(b"\0")
    except OSError:
        return LAUNCH_ENVIRON
    if any(arg.endswith(_TORCHRUN) for arg in argv[:4]):
        return parent + "/environ"
    return LAUNCH_ENVIRON


def changed_in_process(source: str | None = None) -> dict[str, str | None] | None:
    """The variables this process set, changed or unset since it started (its own code, or
    a library it imported: torch.compile sets TORCHINDUCTOR_CACHE_DIR, cv2 prepends to
    LD_LIBRARY_PATH), each with its value at the start (None: not set then), envguard's own
    left out; None where the environment it started with cannot be read (no /proc).
    envguard's command line changes none: the Python API inside a training script is where
    this says something; in a torchrun worker, the start is its agent's (_start_of_run).
    A start whose copy was written over (setproctitle, which Ray and others use, puts a
    long process title there, then zeros) is as unreadable: most of what the smaller of
    the two holds must be alike in both."""
    try:
        with open(source or _start_of_run(), "rb") as f:
            data = f.read()
    except OSError:
        return None
    launch: dict[str, str] = {}
    for entry in data.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:  # (as os.environ reads its start: the first of a name counts)
            launch.setdefault(os.fsdecode(name), os.fsdecode(value))
    now = os.environ
    kept = sum(1 for name, value in launch.items() if now.get(name) == value)
    if not launch or kept * 2 < min(len(launch), len(now)):
        return None
    return {
        name: launch.get(name)
        for name in sorted(now.keys() | launch.keys())
        if name not in _OWN and now.get(name) != launch.get(name)
    }
