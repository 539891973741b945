"""Signals and child processes: how an interrupt stops the whole operation, and what envguard
started is stopped with it.

One handler (on_signal) notes a signal and raises it as one exception, Interrupted; one
deferral (signals_deferred) holds it where stopping halfway would do harm (a child started
but not yet registered, a venv swap); waits that CPython could not interrupt ask
raise_if_signalled() as they poll. Children envguard starts are registered here, so an
interrupt kills them, their process groups and what they left in sessions of their own.

Imported before anything else (the console entry point installs the handlers first), and
on the way to the booted probe's start (probe.booting): only the standard library's C
modules at import (_signal, _thread, os, sys, time), its heavier modules (subprocess,
signal's enums) inside the functions. tests/cli/test_prestart.py holds the boot to that.
"""

from __future__ import annotations

import _thread
import os
import sys
import time

from envguard.errors import EnvguardError

TYPE_CHECKING = False  # typing loads once the early probe runs (envguard.api.early)
if TYPE_CHECKING:
    import signal as _signal  # the same functions and numbers, without enum's wrappers
    import subprocess
    from collections.abc import Callable
    from types import TracebackType
    from typing import IO, Any, Protocol, TypeAlias, TypeVar

    class Cancellable(Protocol):
        """Work started in the background that can be stopped (a probe, a capture)."""

        def cancel(self) -> None: ...

    _Work = TypeVar("_Work", bound=Cancellable)
    # A child process envguard started: subprocess's, or spawn_piped()'s.
    Child: TypeAlias = "subprocess.Popen[bytes] | Spawned"
    _Valid = TypeVar("_Valid")
    _Result = TypeVar("_Result")
else:
    import _signal


class Interrupted(KeyboardInterrupt):
    """A signal (SIGINT, SIGTERM, SIGHUP) raised like Ctrl-C, so the same clean-up runs
    (probes killed, partial files removed, a half-built venv removed); the CLI says
    `error: interrupted (SIGNAME)` and exits 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        """SIGINT, SIGTERM, SIGHUP."""
        import signal

        return signal.Signals(self.signum).name


# What a signal must not hide: set once something the user needs to know became true (a
# rebuilt venv swapped in, the old one moved aside) and cleared once it was reported. The CLI
# prints it as the hint of its `error: interrupted` line, wherever the signal lands.
_interrupt_hint: list[str] = []


def set_interrupt_hint(text: str | None) -> None:
    _interrupt_hint[:] = [text] if text else []


def interrupt_hint() -> str | None:
    return _interrupt_hint[0] if _interrupt_hint else None


# Signals received by on_signal. The Interrupted it raises can be lost (CPython ignores
# exceptions raised inside weakref callbacks, e.g. importlib's module-lock clean-up), so the
# CLI also asks here before it reports anything else.
_received: list[int] = []


def note_signal(signum: int) -> None:
    _received.append(signum)


def received_signal() -> int | None:
    return _received[0] if _received else None


def raise_if_signalled() -> None:
    """Raise the interrupt a signal handler raised and CPython lost (it drops exceptions
    raised inside weakref callbacks and ``__del__``): long waits call this as they poll.
    Not while ``cleaning_up()``: the clean-up an interrupt asked for must get to run."""
    signum = received_signal()
    if signum is not None and not _CLEANING.depth:
        raise Interrupted(signum)


class suppress:
    """contextlib.suppress, which this module cannot import: on the way to the probe's start
    (probe.booting), contextlib, enum and threading are most of what the command would
    import before starting it."""

    def __init__(self, *exceptions: type[BaseException]) -> None:
        self.exceptions = exceptions

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: object, tb: TracebackType | None
    ) -> bool:
        return kind is not None and issubclass(kind, self.exceptions)


class _Depth(_thread._local):
    """How deep this thread is in a block (cleaning_up, signals_deferred), and the block
    itself (``with depth:``)."""

    depth = 0

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(
        self, kind: type[BaseException] | None, exc: object, tb: TracebackType | None
    ) -> None:
        self.depth -= 1


# Per thread: one thread's clean-up must not let another thread (a fleet's worker) go on
# starting and waiting for remote work after the interrupt.
_CLEANING = _Depth()


def cleaning_up() -> _Depth:
    """Waits inside, in this thread, do not stop for a signal already received (a far
    side's staged file is removed after an interrupt, not left behind)."""
    return _CLEANING


def on_signal(signum: int, frame: object) -> None:
    """The handler for SIGINT, SIGTERM and SIGHUP: noted (a wait that CPython could not
    interrupt raises it later) and raised as Interrupted, so the same clean-up runs; only
    noted inside signals_deferred()."""
    note_signal(signum)
    if not _DEFERRING.depth:
        raise Interrupted(signum)


# Per thread, though only the main thread's matters: CPython runs handlers there.
_DEFERRING = _Depth()


class signals_deferred:  # used as the function it was: with signals_deferred()
    """A signal inside is noted and raised once the block is left, never halfway through
    it: a child process is started and registered for clean-up, or not started, never
    orphaned in between (an interrupt raised inside ``Popen``, after the fork, lost the
    child's pid); a venv swap and its bookkeeping are done, or not begun. (A block that
    raises leaves with its own exception.)

    Signals are held, not blocked: with pthread_sigmask another thread (rich's status
    refresher) can take the signal, and Python still runs the handler in the main thread."""

    def __enter__(self) -> None:
        _DEFERRING.__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, exc: object, tb: TracebackType | None
    ) -> None:
        _DEFERRING.__exit__(kind, exc, tb)
        if kind is None:
            raise_if_signalled()


def catchable_signals() -> list[int]:
    """SIGINT, SIGTERM and SIGHUP, less those this process was started ignoring: `nohup
    envguard ...` ignores SIGHUP (a closed terminal must not stop it), a script's background
    job ignores SIGINT; envguard never turns them back on."""
    return [
        s
        for s in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)
        if _signal.getsignal(s) != _signal.SIG_IGN
    ]


def handle_signals() -> None:
    """Install on_signal for SIGINT, SIGTERM and SIGHUP (before anything is started), and
    the hook that keeps an interrupt CPython could not raise from printing a traceback."""
    sys.unraisablehook = _unraisable
    for signum in catchable_signals():
        _signal.signal(signum, on_signal)


def signals_ignored_from_now() -> None:
    """The command is over: its outcome said, its exit code chosen. A signal from here on
    has nothing left to stop, and would otherwise end the process with the default action
    and no line (CPython's finalization puts the default handlers back): ignored."""
    for signum in catchable_signals():
        _signal.signal(signum, _signal.SIG_IGN)


class signals_handled:  # used as the function it was: with signals_handled()
    """on_signal for a block that reports its own interrupt (a rebuild says where it
    stopped and what it left): SIGTERM stops it as Ctrl-C does, for an API caller too, and
    its clean-up runs. Afterwards the caller's handlers are back, and the signals received
    inside are forgotten: the block's error reported them, and they do not stop what the
    caller does next (a script's next call; the CLI's report of that error)."""

    def __enter__(self) -> None:
        self.previous = {s: _signal.signal(s, on_signal) for s in catchable_signals()}
        self.before = len(_received)

    def __exit__(
        self, kind: type[BaseException] | None, exc: object, tb: TracebackType | None
    ) -> None:
        for signum, old in self.previous.items():
            _signal.signal(signum, old)
        del _received[self.before :]


def _unraisable(info: sys.UnraisableHookArgs) -> None:
    """An interrupt raised where CPython cannot raise it (a weakref callback, ``__del__``)
    is not a second error to print: the signal is noted and the next wait raises it."""
    if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
        return
    sys.__unraisablehook__(info)


def interrupt_behind(exc: BaseException) -> int | None:
    """The signal behind ``exc`` when a signal was received: CPython wraps an interrupt
    raised inside ``__set_name__`` (a dataclass field while a module loads) in a
    RuntimeError, which is the signal's doing, not a bug to print."""
    if isinstance(exc, Interrupted):
        return exc.signum
    signum = received_signal()
    if signum is None and isinstance(exc, KeyboardInterrupt):
        return _signal.SIGINT
    return signum


# How long kill_running() waits at most between its SIGTERM and its SIGKILL (an interrupt is
# not kept waiting for TERM_GRACE); it goes on as soon as every child it signalled ended.
_TERM_PAUSE = 0.5

# Children running now (process group id -> the marker in their environment, or None), so an
# interrupt can stop them all.
_RUNNING: dict[int, bytes | None] = {}
_RUNNING_LOCK = _thread.allocate_lock()
# Every child envguard started (live or reaped): never mistaken for an adopted orphan.
_STARTED: set[int] = set()

# A child's chain may carry this variable with a value of its own (see new_marker()). A process
# the chain started in a session of its own (a --via that daemonises) is outside the killed
# process group, but it keeps the variable: on a timeout or an interrupt it is found by it.
MARKER = "ENVGUARD_PROBE_RUN"


def new_marker() -> tuple[str, bytes]:
    """(a new value for MARKER, the ``NAME=value`` entry kill_strays() looks for)."""
    token = os.urandom(8).hex()
    return token, f"{MARKER}={token}".encode()


def start_child(
    argv: list[str],
    *,
    marker: bytes | None = None,
    adopts: bool = False,
    **popen: Any,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own (a timeout or an interrupt kills the whole
    chain, ssh, pct exec, ..., at once) and register it for kill_running().

    A signal in between is held until it is registered (signals_deferred); in a worker
    thread (fleet), the main thread's clean-up may have run already, so a child started
    after the signal is ended here. ``adopts``: the chain may leave orphans in sessions of
    their own (a --via prefix), which envguard, as their subreaper, collects."""
    import subprocess

    if adopts:
        _become_subreaper()
    started: subprocess.Popen[bytes] | None = None
    try:
        with signals_deferred():
            started = subprocess.Popen(argv, start_new_session=True, **popen)
            with _RUNNING_LOCK:
                _RUNNING[started.pid] = marker
                _STARTED.add(started.pid)
    except BaseException:  # an interrupt
        if started is not None:
            with suppress(OSError, ValueError):
                end_chain(started, marker=marker, adopts=adopts)
                for pipe in (started.stdin, started.stdout, started.stderr):
                    if pipe is not None:
                        pipe.close()
            forget(started.pid)
        raise
    return started


class Spawned:
    """A child spawn_piped() started: the part of ``subprocess.Popen`` envguard uses on one
    (``pid``, ``args``, its three pipes, ``returncode``, ``poll()``, ``wait(timeout)``),
    without importing subprocess, whose imports are most of what a command pays before its
    probe can start (probe.booting)."""

    def __init__(
        self, argv: list[str], pid: int, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes]
    ) -> None:
        self.args, self.pid = argv, pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None
        self._waiting = _thread.allocate_lock()  # one waitpid() at a time, as Popen's
        # A descriptor that reads ready the moment the child ends (Linux 5.3's pidfd, opened
        # before anything could collect the child: it names this child, never a pid
        # reused), so wait(timeout) wakes then; -1 where there is none (a sleep, growing).
        self._ends = -1
        with suppress(AttributeError, OSError):
            self._ends = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is None and self._waiting.acquire(False):
            try:
                self._collect(os.WNOHANG)
            finally:
                self._waiting.release()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code once it ended (-N: killed by signal N); ``TimeoutExpired`` past
        ``timeout`` seconds, as Popen's. With a timeout, it wakes when the child ends (its
        pidfd), not at the next of Popen's growing sleeps: a probe ends a millisecond
        after its report, and a snapshot waited up to 3 ms more for the sleep to end."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.returncode is None:
            if deadline is None:
                with self._waiting:
                    self._collect(0)
                continue
            self.poll()
            left = deadline - time.monotonic()
            if self.returncode is None and left <= 0:
                import subprocess

                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            if self.returncode is None:
                delay = min(delay * 2, left, 0.05)
                self._ended_within(self._ends, delay, min(left, 0.05))
        return self.returncode

    @staticmethod
    def _ended_within(ends: int, delay: float, most: float) -> None:
        """Return once the child ended (its pidfd ``ends`` reads ready) or ``most`` seconds
        passed; without a pidfd (or a poll), after ``delay``. ``most`` is short: another
        thread's collect may close ``ends`` meanwhile, and its number be reused by an
        unrelated descriptor, which is then waited on no longer than a sleep would."""
        if ends >= 0:
            try:
                import select  # (runner.output loads it before the probe's answer is in)

                poller = select.poll()  # (select.select refuses descriptors past 1023)
                poller.register(ends, select.POLLIN)
                poller.poll(most * 1000)
                return
            except (ImportError, OSError, ValueError):
                pass  # (closed meanwhile: the next poll() collects it)
        time.sleep(delay)

    def _collect(self, flags: int) -> None:
        if self.returncode is not None:
            return
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # collected elsewhere (SIGCHLD ignored): Popen says 0
            self.returncode = 0
        else:
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        if self.returncode is not None and self._ends >= 0:
            ends, self._ends = self._ends, -1
            with suppress(OSError):
                os.close(ends)


def spawn_piped(argv: list[str], *, marker: bytes, env: dict[str, str]) -> Spawned | None:
    """``argv`` started as start_child() starts it with its three pipes (a session of its
    own, registered, SIGPIPE and SIGXFSZ back to their defaults, no inherited descriptor
    but the pipes), by ``os.posix_spawn``: no subprocess to import first. None where that
    cannot be done so (not Linux, no /proc, a standard descriptor closed): start_child()
    then. OSError when ``argv[0]`` cannot be run. (glibc's posix_spawn leaves its own two
    internal signals, 32 and 33, ignored in the child; a libc sets its handlers for them
    when it needs them, and no program takes them at their default.)"""
    if sys.platform != "linux" or not hasattr(os, "posix_spawn"):
        return None
    try:
        inherited = [int(name) for name in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):
        return None
    ends: list[int] = []  # the child's ends, then the parent's
    try:
        for _ in range(3):
            ends.extend(os.pipe())  # not inheritable: only what dup2 gives the child is
        if min(ends) < 3:  # started with a standard descriptor closed: Popen knows that case
            return None
        stdin_r, stdin_w, out_r, out_w, err_r, err_w = ends
        actions: list[tuple[Any, ...]] = [
            (os.POSIX_SPAWN_DUP2, stdin_r, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ]
        for fd in inherited:  # close_fds=True: what envguard inherited is not passed on
            with suppress(OSError):  # the listing's own, closed now
                if fd > 2 and fd not in ends and os.get_inheritable(fd):
                    actions.append((os.POSIX_SPAWN_CLOSE, fd))
        pid = 0
        try:
            with signals_deferred():
                pid = os.posix_spawn(
                    argv[0],
                    argv,
                    env,
                    file_actions=actions,
                    setsid=True,
                    setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ),
                )
                with _RUNNING_LOCK:
                    _RUNNING[pid] = marker
                    _STARTED.add(pid)
        except NotImplementedError:  # no POSIX_SPAWN_SETSID in this libc
            return None
        except BaseException:  # an interrupt once it started: ended and collected here
            if pid:
                kill_group(pid)
                with suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                forget(pid)
            raise
        for fd in (stdin_r, out_w, err_w):
            os.close(fd)
            ends.remove(fd)
        pipes = (open(stdin_w, "wb"), open(out_r, "rb"), open(err_r, "rb"))  # noqa: SIM115
        child = Spawned(argv, pid, *pipes)  # (closed by whoever ends the child)
        ends.clear()  # the files own them now
        return child
    finally:
        for fd in ends:
            os.close(fd)


def forget(pid: int) -> None:
    """``pid`` ended (or was collected): kill_running() leaves it alone from now on."""
    with _RUNNING_LOCK:
        _RUNNING.pop(pid, None)


def running(pid: int) -> bool:
    """``pid`` is a child kill_running() would stop."""
    with _RUNNING_LOCK:
        return pid in _RUNNING


def kill_group(pid: int) -> None:
    """SIGKILL the process group of the child ``pid`` (it leads its own session)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, _signal.SIGKILL)


# How long a prefix (srun, ssh, kubectl) has to end after SIGTERM before SIGKILL: srun
# cancels its job step on SIGTERM, and on SIGKILL leaves the step running on the nodes.
TERM_GRACE = 5.0


def terminate_group(proc: subprocess.Popen[Any] | Spawned, grace: float) -> None:
    """SIGTERM the child's process group, then wait up to ``grace`` seconds for the child
    to end (it may take the rest of its group down with it)."""
    import subprocess

    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, _signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(grace)


def end_chain(
    proc: subprocess.Popen[Any] | Spawned,
    *,
    marker: bytes | None = None,
    adopts: bool = False,
    grace: float = 0.0,
) -> None:
    """Kill a child's group, what it started in other sessions (by its marker, or adopted
    by envguard as their subreaper), and collect it. ``grace``: SIGTERM first, and SIGKILL
    only for what is still there after that many seconds (a --via prefix cleans up)."""
    if grace > 0 and proc.poll() is None:
        terminate_group(proc, grace)
    kill_group(proc.pid)
    if marker is not None:
        kill_strays(marker)
    proc.wait()
    if adopts:
        kill_adopted()  # the chain's orphans, now that its leader is gone


def kill_running() -> None:
    """Kill every child still running (and whatever its prefix started): Ctrl-C on a fleet."""
    with _RUNNING_LOCK:
        groups = list(_RUNNING.items())
    for pgid, _mark in groups:  # SIGTERM first: a prefix (srun) cancels what it started
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, _signal.SIGTERM)
    if groups:
        _until_ended([pgid for pgid, _ in groups], _TERM_PAUSE)
    for pgid, mark in groups:
        kill_group(pgid)
        if mark is not None:
            kill_strays(mark)
    # The killed chains' orphans come to envguard as they die, when it is their subreaper
    # (a --via probe made it one); a local probe leaves none, and Ctrl-C is not kept waiting.
    if groups and _SUBREAPER:
        for _ in range(3):
            time.sleep(0.05)
            kill_adopted()


def _until_ended(pids: list[int], seconds: float) -> None:
    """Return once each of ``pids`` (children of this process, each leading its process
    group) has ended with all of its group, or ``seconds`` passed: a local probe dies of its
    SIGTERM at once, and Ctrl-C sat out the whole pause. A group whose leader ended is
    waited for while a member of it still runs (a wrapper script's srun, still cancelling
    its job step). None is collected here (WNOWAIT): whoever started it still collects it,
    and reads its exit. Where that cannot be told (no waitid), the whole pause."""
    deadline = time.monotonic() + seconds
    while pids and time.monotonic() < deadline:
        ended = {pid for pid in pids if _ended(pid)}
        running = _running_groups(ended) if ended else set()
        pids = [pid for pid in pids if pid not in ended or pid in running]
        if pids:  # (a look through /proc is a few ms on a busy node: fewer of them)
            pause = 0.02 if running else 0.005
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))


def _running_groups(groups: set[int]) -> set[int]:
    """Those of ``groups`` (process group ids) with a member still running, not a zombie
    (Linux /proc; none where there is no /proc)."""
    found: set[int] = set()
    for pid in processes():
        fields = _stat_fields(pid)
        if fields is not None and fields[2] in groups and fields[0] != b"Z":
            found.add(fields[2])
    return found


def _ended(pid: int) -> bool:
    try:
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        return os.waitid(os.P_PID, pid, flags) is not None
    except ChildProcessError:  # collected already (by the thread that started it), or
        try:  # not this process's child (a forked worker's copy of the list): the pause
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            pass
        return False
    except (AttributeError, OSError):  # no waitid here (macOS): told by the pause alone
        return False


def _become_subreaper() -> None:
    """Linux: orphans of a --via chain (a child that left its session and cleared its
    environment, so neither the process group nor the marker finds it) are re-parented to
    envguard instead of init, where kill_adopted() finds them."""
    global _SUBREAPER
    if _SUBREAPER or not sys.platform.startswith("linux"):
        return
    _SUBREAPER = True
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not available: the process group and the marker still apply


_SUBREAPER = False
_PR_SET_CHILD_SUBREAPER = 36


def kill_adopted() -> None:
    """SIGKILL and collect every child of envguard that it did not start: orphans of killed
    chains (see _become_subreaper). Children still running are left alone."""
    me = os.getpid()
    with _RUNNING_LOCK:
        ours = set(_RUNNING)
    for pid in processes():
        if pid in ours:
            continue
        if parent_of(pid) == me and pid not in _STARTED:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, _signal.SIGKILL)
            with suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)


def processes() -> list[int]:
    """Every live process's pid (Linux /proc); none where there is no /proc."""
    try:
        with os.scandir("/proc") as scan:
            return [int(e.name) for e in scan if e.name.isdigit()]
    except OSError:
        return []


def parent_of(pid: int) -> int | None:
    """``pid``'s parent (Linux /proc); None when it is gone or there is no /proc."""
    fields = _stat_fields(pid)
    return None if fields is None else fields[1]


def _stat_fields(pid: int) -> tuple[bytes, int, int] | None:
    """(state letter, parent, process group) of ``pid`` from Linux's /proc/PID/stat, read
    past its name (which may hold anything); None when it is gone or there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state, parent, group = fh.read(4096).rsplit(b")", 1)[1].split()[:3]
        return state, int(parent), int(group)
    except (OSError, IndexError, ValueError):
        return None


def kill_strays(marker: bytes) -> None:
    """SIGKILL this user's processes whose environment holds ``marker`` (Linux /proc)."""
    try:
        with os.scandir("/proc") as scan:
            entries = list(scan)
    except OSError:
        return
    me, uid = os.getpid(), os.getuid()
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                environ = fh.read(1 << 20)
        except OSError:
            continue  # gone, or not ours to read
        if marker in environ.split(b"\0"):
            with suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), _signal.SIGKILL)


def validate_meanwhile(
    start: Callable[[], _Work | None],
    validate: Callable[[], _Valid],
    *,
    start_valid: Callable[[_Valid], _Work],
    finish: Callable[[_Work], _Result],
) -> tuple[_Valid, _Result]:
    """Start work (a probe) with ``start()``, run ``validate()`` meanwhile, then ``finish``
    the work: (what validate returned, what finish returned). ``start()`` returns None when
    the work may start only once the input is valid: ``start_valid`` starts it then.

    An error or an interrupt anywhere cancels the work started: an invalid input never
    leaves a probe running. An error starting it early is raised only once the input is
    valid: the input's own errors come first."""
    work: _Work | None = None
    early: EnvguardError | None = None
    try:
        try:
            work = start()
        except EnvguardError as exc:
            early = exc
        valid = validate()
        if early is not None:
            raise early
        if work is None:
            work = start_valid(valid)
        return valid, finish(work)
    except BaseException:
        if work is not None:
            work.cancel()
        raise
