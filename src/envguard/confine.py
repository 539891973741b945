"""Where untrusted input may send envguard: the roots a snapshot's paths must lie under, and
git that runs nothing a repo's config names. Standard library only, Python 3.8+: the probe
ships this module to the target as well (probe/payload.py).

A snapshot (or a lockfile, or a pull request) is untrusted input. The tracked files, caches
and repos it names are hashed, walked or given to git only when they lie, after symlinks
are resolved, under the working directory, its git work tree, the target's own compile
cache folders or a path the user passed on the command line (``--allow``). Paths the user
named when taking a snapshot are not confined: the user chose them.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

# Git that runs no program a repo's config names, whoever wrote the config: no fsmonitor
# program, no hooks, no pager, no textconv or external diff (git >= 2.31 reads
# GIT_CONFIG_COUNT; older ones ignore it), no signature check (log.showSignature would run
# gpg.program), no recursion into submodules (their configs are not read for filters).
# safe.bareRepository=explicit (git >= 2.38): a folder of the checkout that is itself a git
# directory (HEAD, objects/, a config naming a clean filter and core.worktree) is refused,
# never used: a pull request can commit such a folder, but never a .git directory, so the
# only repository configs git reads are ones the user's own clones made.
# None of the commands envguard runs reaches a remote, so core.sshCommand, askpass and
# credential helpers are never consulted.
# Filter drivers have names of the config's choosing: run_git reads them from the config
# and switches each off (without_filters). Every git envguard runs, here and on the far
# side of --via, goes through run_git.
SAFE_GIT_ENV = {
    "GIT_CONFIG_COUNT": "6",
    "GIT_CONFIG_KEY_0": "core.fsmonitor",
    "GIT_CONFIG_VALUE_0": "false",
    "GIT_CONFIG_KEY_1": "core.hooksPath",
    "GIT_CONFIG_VALUE_1": "/dev/null",
    "GIT_CONFIG_KEY_2": "core.pager",
    "GIT_CONFIG_VALUE_2": "cat",
    "GIT_CONFIG_KEY_3": "safe.bareRepository",
    "GIT_CONFIG_VALUE_3": "explicit",
    "GIT_CONFIG_KEY_4": "log.showSignature",
    "GIT_CONFIG_VALUE_4": "false",
    "GIT_CONFIG_KEY_5": "submodule.recurse",
    "GIT_CONFIG_VALUE_5": "false",
    "GIT_TERMINAL_PROMPT": "0",
    # No opportunistic index refresh: reading a repo never writes .git/index.
    "GIT_OPTIONAL_LOCKS": "0",
}

_FILTER_COMMANDS = ("clean", "smudge", "process")
# The git arguments that list the config's filter settings (run with SAFE_GIT_ENV).
FILTER_QUERY = ("config", "-z", "--name-only", "--get-regexp", r"^filter\.")


def filter_drivers(repo: str) -> List[str]:
    """The filter drivers (``filter.<driver>.*``) the config of ``repo`` names, its includes
    and the user's and system's files too. Reading the config runs nothing."""
    import subprocess

    try:
        proc = subprocess.run(
            ["git", "-C", repo, *FILTER_QUERY],
            env=git_environ(SAFE_GIT_ENV),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return drivers_named(proc.stdout)


def drivers_named(output: Optional[bytes]) -> List[str]:
    """The filter drivers in what FILTER_QUERY printed (None or empty: none), or a `git
    config -z --get-regexp` with values (each key, a line break, its value): the keys of
    other sections left out."""
    entries = (output or b"").decode("utf-8", "surrogateescape").split("\0")
    names = [e.partition("\n")[0] for e in entries]
    named = [n for n in names if n.startswith("filter.") and n.count(".") >= 2]
    return sorted({n[len("filter.") : n.rindex(".")] for n in named})


def without_filters(drivers: Iterable[str]) -> Dict[str, str]:
    """SAFE_GIT_ENV plus, for each filter driver, an empty clean, smudge and process
    command and ``required`` off: git then passes the committed blob (and the work tree's
    file) through unchanged, as if no .gitattributes routed it anywhere. `git diff`,
    `status`, `stash` and `checkout` would otherwise run the driver's program, and a
    committed .gitattributes may route any file to any driver the user's config defines."""
    env = dict(SAFE_GIT_ENV)
    count = int(env["GIT_CONFIG_COUNT"])
    for driver in drivers:
        for key, value in [(c, "") for c in _FILTER_COMMANDS] + [("required", "false")]:
            env["GIT_CONFIG_KEY_%d" % count] = "filter.%s.%s" % (driver, key)
            env["GIT_CONFIG_VALUE_%d" % count] = value
            count += 1
    env["GIT_CONFIG_COUNT"] = str(count)
    return env


# What git itself calls repository-local variables (`git rev-parse --local-env-vars`): set
# by a git hook envguard runs in (GIT_INDEX_FILE during a commit, GIT_DIR in others) or by
# the user's shell, they would point `git -C repo` at another repository, index or config.
GIT_LOCAL_VARIABLES = frozenset(
    {
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_OBJECT_DIRECTORY",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_GRAFT_FILE",
        "GIT_INDEX_FILE",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_REPLACE_REF_BASE",
        "GIT_PREFIX",
        "GIT_INTERNAL_SUPER_PREFIX",
        "GIT_SHALLOW_FILE",
        "GIT_COMMON_DIR",
    }
)


def git_environ(settings: Dict[str, str]) -> Dict[str, str]:
    """os.environ without the repository-local variables, then ``settings``."""
    env = {k: v for k, v in os.environ.items() if k not in GIT_LOCAL_VARIABLES}
    env.update(settings)
    return env


def git_env(repo: str) -> Dict[str, str]:
    """The settings run_git uses for ``repo``: SAFE_GIT_ENV, every filter switched off."""
    return without_filters(filter_drivers(repo))


def run_git(
    repo: str,
    *args: str,
    env: Optional[Dict[str, str]] = None,
    stderr: Optional[int] = None,
    timeout: Optional[float] = 60,
) -> subprocess.CompletedProcess[bytes]:
    """``git -C repo args`` with ``env`` (default: git_env(repo)) over os.environ, stdin
    closed, stdout captured (and stderr, unless ``stderr`` says where it goes). The one
    place envguard runs git; raises OSError or subprocess.TimeoutExpired."""
    import subprocess

    return subprocess.run(
        ["git", "-C", repo, *args],
        env=git_environ(git_env(repo) if env is None else env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr is None else stderr,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def run_gits(
    repo: str,
    commands: Sequence[Sequence[str]],
    *,
    env: Dict[str, str],
    timeout: float = 60,
) -> List[Optional[Tuple[int, bytes]]]:
    """Each of ``commands`` as ``git -C repo args`` with ``env`` over os.environ, all started
    at once (what they read is independent: one process start is the cost of most), stdin
    closed, stderr dropped. (exit code, stdout) of each, or None for one that could not be
    started or ran past ``timeout`` seconds for the lot (those still running then are
    killed); none is left running when this returns, whatever happens. Started with
    posix_spawn where there is one: importing subprocess (selectors, threading, signal,
    locale) was a cost paid at every probe."""
    import select
    import time

    environ = git_environ(env)
    if not hasattr(os, "posix_spawn") or not hasattr(select, "poll"):
        return _run_gits_subprocess(repo, commands, environ, timeout)
    exe = on_path("git", environ.get("PATH", os.defpath))
    if exe is None:
        return [None] * len(commands)
    deadline = time.monotonic() + timeout
    pids: List[int] = []
    codes: Dict[int, int] = {}  # pid -> exit code, once reaped
    outputs: List[List[bytes]] = []
    reading: Dict[int, int] = {}  # the read end of a stdout still open -> its command
    try:
        for args in commands:
            pid, read_fd = spawn_piped(exe, ["git", "-C", repo, *args], environ)
            reading[read_fd] = len(pids)
            pids.append(pid)
            outputs.append([])
        poller = select.poll()
        for fd in reading:
            poller.register(fd, select.POLLIN)
        while reading:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            for fd, _ in poller.poll(left * 1000):
                data = os.read(fd, 1 << 16)
                if data:
                    outputs[reading[fd]].append(data)
                else:  # its end: git is exiting
                    poller.unregister(fd)
                    os.close(fd)
                    del reading[fd]
        for pid in pids:
            code = _reaped(pid, deadline)
            if code is None:
                break
            codes[pid] = code
    except (OSError, TimeoutError):
        pass
    finally:
        for fd in reading:
            os.close(fd)
        for pid in pids:
            if pid not in codes:
                try:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                except OSError:
                    pass
    out: List[Optional[Tuple[int, bytes]]] = []
    for at, pid in enumerate(pids):
        out.append((codes[pid], b"".join(outputs[at])) if pid in codes else None)
    return out + [None] * (len(commands) - len(out))


def _reaped(pid: int, deadline: float) -> Optional[int]:
    """The exit code of ``pid`` (minus the signal that ended it, as subprocess says), once
    it exits; None at ``deadline``."""
    import time

    pause = 0.0002  # a process that closed its stdout is most often exiting: look soon
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
        if time.monotonic() > deadline:
            return None
        time.sleep(pause)
        pause = min(pause * 2, 0.005)


def spawn_piped(exe: str, argv: List[str], environ: Mapping[str, str]) -> Tuple[int, int]:
    """(pid, the read end of its stdout) of ``exe`` started by posix_spawn with ``argv`` and
    ``environ``, stdin and stderr on /dev/null (no subprocess import); OSError."""
    read_fd, write_fd = os.pipe()
    try:
        pid = os.posix_spawn(
            exe,
            argv,
            environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, write_fd, 1),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ],
        )
    except OSError:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return pid, read_fd


def on_path(name: str, path: str) -> Optional[str]:
    """Where ``name`` runs from on the PATH ``path``, as the shell finds it."""
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder, name)
        if folder and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _run_gits_subprocess(
    repo: str, commands: Sequence[Sequence[str]], environ: Dict[str, str], timeout: float
) -> List[Optional[Tuple[int, bytes]]]:
    """run_gits where there is no posix_spawn or poll: with subprocess."""
    import subprocess
    import time

    procs: List[subprocess.Popen[bytes]] = []
    out: List[Optional[Tuple[int, bytes]]] = []
    deadline = time.monotonic() + timeout
    try:
        for args in commands:
            procs.append(
                subprocess.Popen(
                    ["git", "-C", repo, *args],
                    env=environ,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL,
                )
            )
        for proc in procs:
            # Read in turn: a later one whose pipe fills waits for its turn, never for us.
            stdout, _ = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            out.append((proc.returncode, stdout))
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    return out + [None] * (len(commands) - len(out))


DIFF_ARGS = ("--no-color", "--no-ext-diff", "--no-textconv", "--binary")


OUTSIDE = "not read: outside the working directory, its git work tree and the cache folders"


def work_tree(path: str) -> Optional[str]:
    """The nearest folder at or above ``path`` that holds a ``.git`` entry (no git run)."""
    here = os.path.realpath(path)
    while True:
        if os.path.lexists(os.path.join(here, ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


class Roots:
    """The folders a snapshot's paths must lie under; ``None`` roots admit everything."""

    def __init__(self, roots: Optional[Iterable[str]]) -> None:
        self.roots = None if roots is None else sorted({os.path.realpath(r) for r in roots})

    def admits(self, path: str, cache: bool = False) -> bool:
        if self.roots is None:
            return True
        real = os.path.realpath(os.path.expanduser(path))
        if cache and _compile_cache_place(real):
            return True
        return any(real == r or real.startswith(r.rstrip("/") + "/") for r in self.roots)


def _compile_cache_place(real: str) -> bool:
    """torch inductor's per-user folder in the temp dir (``/tmp/torchinductor_<user>``): a
    snapshot taken as another user names that user's folder, and only sizes are read."""
    parent, name = os.path.split(real)
    import tempfile  # here: it is slow for the probe to import, and few snapshots need it

    temps = {os.path.realpath(tempfile.gettempdir()), "/tmp"}
    return parent in temps and name.startswith("torchinductor_") and len(name) > 14


def roots_for(args: Dict[str, object], cwd: str, caches: List[Tuple[str, str]]) -> Roots:
    """From the probe's arguments: ``confine`` on, the user's ``allow`` list, the cwd."""
    if not args.get("confine"):
        return Roots(None)
    roots = [cwd]
    top = work_tree(cwd)
    if top:
        roots.append(top)
    roots.extend(path for _, path in caches)
    allow = args.get("allow")
    if isinstance(allow, list):
        roots.extend(os.path.expanduser(p) for p in allow if isinstance(p, str) and p)
    return Roots(roots)


def unsafe_place(path: str) -> Optional[str]:
    """Why the interpreter at ``path`` could have been planted by someone else, or None.

    Everything the interpreter runs from is checked, as written and as resolved: each
    folder and symlink on the way to it (a venv's ``bin/python`` is a link into /usr/bin,
    but its folder holds the pyvenv.cfg Python reads even under -I -S), the pyvenv.cfg
    beside it and the ``home`` that file names (where the standard library comes from).
    Unsafe: owned by another user (root is trusted), a folder anyone can write to without
    the sticky bit, a file others can write. Run on the side that holds the file (the far
    side of --via too) before a snapshot-named interpreter runs."""
    lexical = os.path.abspath(path)
    why = _unsafe_both(lexical)
    if why:
        return why
    exe_dir = os.path.dirname(lexical)
    for cfg in (
        os.path.join(exe_dir, "pyvenv.cfg"),
        os.path.join(os.path.dirname(exe_dir), "pyvenv.cfg"),
    ):
        if not os.path.lexists(cfg):
            continue
        why = _unsafe_chain(cfg, resolve=True)
        if why:
            return why
        home = _venv_home(cfg)
        why = _unsafe_both(os.path.abspath(home)) if home else None
        if why:
            return why
    return None


# The first bytes of a program the loader runs itself: ELF, and Mach-O (thin, both byte
# orders and widths, and universal). A `#!` script runs whatever its first line names.
_PROGRAM_MAGIC = (
    b"\x7fELF",
    b"\xfe\xed\xfa\xce",
    b"\xce\xfa\xed\xfe",
    b"\xfe\xed\xfa\xcf",
    b"\xcf\xfa\xed\xfe",
    b"\xca\xfe\xba\xbe",
)


def not_python(path: str) -> Optional[str]:
    """Why the file at ``path`` is not a real Python interpreter, or None; told without
    running it. A real one is a program (not a script) named python* or pypy* once links
    are resolved (a link to /bin/sh is not one), in a Python's layout: a venv's
    ``bin`` (a pyvenv.cfg beside it or one folder up), or an installation whose
    ``lib/python3.X`` (``lib/pypy3.X``) holds ``os.py`` beside the resolved program."""
    import glob
    import re
    import stat

    real = os.path.realpath(path)
    if not re.match(r"^(python|pypy)[0-9.]*$", os.path.basename(real)):
        return "not a Python interpreter: a program of another name (%s)" % real
    try:  # non-blocking: a FIFO named as the interpreter must not hang the check
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return "not a Python interpreter: cannot be read (%s)" % real
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not a Python interpreter: not a regular file (%s)" % real
        magic = os.read(fd, 4)
    except OSError:
        return "not a Python interpreter: cannot be read (%s)" % real
    finally:
        os.close(fd)
    if magic[:2] == b"#!":
        return "not a Python interpreter: a script (%s)" % real
    if magic not in _PROGRAM_MAGIC:
        return "not a Python interpreter: not a program (%s)" % real
    exe_dir = os.path.dirname(os.path.abspath(path))
    for cfg in (
        os.path.join(exe_dir, "pyvenv.cfg"),
        os.path.join(os.path.dirname(exe_dir), "pyvenv.cfg"),
    ):
        if os.path.isfile(cfg):
            return None
    prefix = os.path.dirname(os.path.dirname(real))
    for pattern in ("lib/python3*/os.py", "lib/pypy3*/os.py", "lib-python/3*/os.py"):
        if glob.glob(os.path.join(glob.escape(prefix), pattern)):
            return None
    return "not a Python interpreter: no standard library beside it (%s)" % real


def _unsafe_both(place: str) -> Optional[str]:
    """``place`` checked as written and as resolved."""
    return _unsafe_chain(place, resolve=False) or _unsafe_chain(place, resolve=True)


def _unsafe_chain(start: str, *, resolve: bool) -> Optional[str]:
    """The first place on ``start``'s way up to / that someone else could have planted:
    with ``resolve``, the real path's; without, each component as written (lstat)."""
    import stat

    me = os.geteuid()
    place = os.path.realpath(start) if resolve else start
    first = True
    while True:
        try:
            st = os.stat(place) if resolve else os.lstat(place)
        except OSError:
            return "a place that cannot be inspected (%s)" % place
        if st.st_uid not in (0, me):
            return "a place owned by another user (%s)" % place
        link = stat.S_ISLNK(st.st_mode)
        if not first and not link and st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
            return "a folder anyone can write to (%s)" % place
        if first and not link and st.st_mode & (stat.S_IWOTH | stat.S_IWGRP):
            return "a file others can change (%s)" % place
        parent = os.path.dirname(place)
        if parent == place:
            return None
        place, first = parent, False


def _venv_home(cfg: str) -> Optional[str]:
    """The ``home = ...`` of a pyvenv.cfg (read as site.py reads it), or None."""
    from .reading import read_bytes

    try:
        text = read_bytes(cfg, 65536).decode("utf-8", "replace")  # a regular file, capped
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "home":
            return value.strip() or None
    return None
