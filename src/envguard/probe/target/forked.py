"""Work run in a forked child, on the other core, its plain result (marshal's types) read
back by a deadline.

A thread would share the probe's GIL: the installed-files check is one ``lstat`` per file
plus a little Python for each, and while the probe's own thread runs Python (the library
and fit scans) the checking thread waits up to the switch interval for the GIL after every
``lstat`` it made. A forked child runs beside the probe instead, and only its answer (a few
KB) crosses a pipe.

The child never writes to the probe's stdout (the report's pipe: a child left behind must
not hold it open), exits with ``os._exit`` (no atexit, no buffers of the parent flushed),
is killed when its deadline passes (a site-packages on a slow or network file system gives
a note, never a hang), and ends by itself soon after it when no parent is left to kill it.
It stays in the probe's process group, so the host's kill of that group reaches it too.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import marshal
import os
import time

from .reading import write_all

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, List, Optional, Tuple

# The most a child's answer may hold (the check's answer is a few KB; the rows of RECORDs
# read afresh, a few MB at most).
ANSWER_CAP = 256 << 20
# How long a killed child is waited on.
REAP_SECONDS = 1.0


# The kernel's count of runnable threads right now (the 4th field, "running/all").
LOADAVG = "/proc/loadavg"


def spare_core() -> bool:
    """Whether a core is idle now for a child to run beside the probe: fewer threads
    runnable this instant (this one among them; not the process that started the probe,
    which only waits for its answer once its own start-up is done: envguard imports its
    command line while the probe runs) than the cores this process may use, at one of
    SAMPLES looks LOOK_PAUSE apart, or, when there are as many at each, a 1-minute load
    average under the cores less a half. One look saw a thread runnable for a moment (a
    kernel worker: kcompactd, rcu_preempt) in 2 runs of 30 on an idle 2-core machine, and
    4 in 10 when runs came back to back (a benchmark's), where the average, which counts
    the runs that came just before, refused the core too. Such a worker mostly runs for
    microseconds: the next look, a quarter of a millisecond later, no longer sees it (looks
    a millisecond apart cost 8 CUDA snapshots of 20 another 1.2 ms or 2.4 ms; a quarter of a
    millisecond apart, 3 of 60 looked again, 2 of them a third time). Busy at every look
    and by the average, the machine is at full load, where a second process only adds
    fork's costs. Where the count cannot be read, the average less one (this process's
    own) is the rule."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if cores < 2:
        return False
    try:
        for look in range(SAMPLES):
            if look:
                time.sleep(LOOK_PAUSE)
            fields = _loadavg()
            if int(fields[3].split(b"/")[0]) - _parent_running() < cores:
                return True
        return float(fields[0]) < cores - 0.5
    except (OSError, ValueError, IndexError):
        pass
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return True
    return load < cores - 1


# How many times spare_core() looks at what runs before it takes the machine for busy, and
# the seconds between two looks.
SAMPLES = 3
LOOK_PAUSE = 0.00025


def _loadavg() -> List[bytes]:
    with open(LOADAVG, "rb") as fh:
        return fh.read(256).split()


# The threads of the parent _parent_running() looks at, at most (a library caller may run
# thousands; envguard's command line runs a few): its first (the main one) and its newest.
PARENT_THREADS = 16
# The parent's threads started after the probe that count as the parent, at most: envguard
# starts two to read the probe's output and one to feed it its argument. A library
# caller's thread pool started meanwhile is a load beyond these.
PARENT_NEW = 2


def _parent_running() -> int:
    """How many of the runnable threads of the process that started this one count as
    that process, soon waiting for this probe's answer (of PARENT_THREADS of them: its
    main one and its newest): those it had before this probe started count once together,
    whatever they are (its main one, and a library caller's other threads: a load like
    any other), and each one it started since counts on its own, PARENT_NEW at most (the
    threads envguard starts to read this probe's output and feed it its argument: one was
    runnable at the look beside envguard's main thread in 1 CUDA snapshot of 60). Start
    times are in clock ticks: a thread started in the probe's own tick, just before it,
    counts as new."""
    folder = "/proc/%d/task" % os.getppid()
    try:
        tasks = os.listdir(folder)
        began = int(_stat("/proc/self/stat")[19])  # (field 22)
    except (OSError, IndexError, ValueError):
        return 0
    if len(tasks) > PARENT_THREADS:  # (listed as they were made: the main one first)
        tasks = tasks[:1] + tasks[1 - PARENT_THREADS :]
    older = newer = 0
    for task in tasks:
        try:
            fields = _stat("%s/%s/stat" % (folder, task))
            if fields[0] == b"R":
                if int(fields[19]) < began:  # (start times in clock ticks since boot)
                    older = 1
                else:
                    newer += 1
        except (OSError, IndexError, ValueError):
            continue
    return older + min(newer, PARENT_NEW)


def spread(pids: List[int]) -> None:
    """Where two forked children, working beside each other, both run on one core while
    this process, about to wait for them, runs on another: one of them moved to this core
    (Linux's sched_setaffinity), its own cores given back at once. The kernel puts both
    children of a fork on the core that was idle then (5 CUDA snapshots of 30), and once
    this process waits it does not pull one over to the core left idle until its next
    balance, up to a tick (4 ms) later: they take turns on one core meanwhile. Nothing
    where they run apart already, or either is not running."""
    if len(pids) != 2 or not hasattr(os, "sched_setaffinity"):
        return
    here, first, second = _core_of("self"), _core_of(pids[0]), _core_of(pids[1])
    if here is None or first is None or first != second or first == here:
        return
    try:
        allowed = os.sched_getaffinity(pids[1])
        if here in allowed:
            try:
                os.sched_setaffinity(pids[1], {here})
            finally:  # (an interrupt between the two leaves no share held to one core)
                os.sched_setaffinity(pids[1], allowed)
    except OSError:
        pass  # (ended meanwhile: nothing to move)


def _core_of(pid: object) -> Optional[int]:
    """The core ``pid`` runs on now (Linux /proc; "self": this process, else a child of
    this one), None where it is not running or runnable, is not this process's child (a
    number reused once SIGCHLD ignored had a child collected at its exit; a /proc of
    another PID namespace), or where that cannot be told."""
    try:
        fields = _stat("/proc/%s/stat" % pid)
        if fields[0] != b"R" or (pid != "self" and int(fields[1]) != os.getpid()):
            return None
        return int(fields[36])  # (field 39, the processor)
    except (OSError, IndexError, ValueError):
        return None


def _stat(path: str) -> List[bytes]:
    """The fields of a Linux /proc stat file past the process's name (which may hold
    anything): the state first (field 3). OSError where it cannot be read."""
    with open(path, "rb") as fh:
        return fh.read(4096).rpartition(b")")[2].split()


class Forked:
    """``work()`` started in a forked child; ``result()`` its value, or None with a reason
    in ``failed``. ``started`` is False where there is no fork (the caller runs ``work``
    itself)."""

    def __init__(self, work: Callable[[], Any], seconds: Optional[float] = None) -> None:
        self.pid = 0
        self.fd = -1
        self.failed: Optional[str] = None
        self.started = False
        if not hasattr(os, "fork"):
            return
        import gc

        read_fd, write_fd = os.pipe()
        gc.freeze()  # the objects both sides hold are never scanned: no page copied for it
        try:
            pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            return
        if pid == 0:  # the child: answer on the pipe, then leave without cleanup
            _child(work, read_fd, write_fd, seconds)
        os.close(write_fd)
        self.pid, self.fd, self.started = pid, read_fd, True

    def result(self, timeout: float) -> Optional[Any]:
        """The child's value once it answered; None past ``timeout`` seconds (the child is
        killed) or when it failed, with ``failed`` saying why. What is already in the pipe
        is read whatever time is left: an answer given in time is never thrown away
        because it was asked for late."""
        import select

        chunks = []
        total = 0
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                ready = select.select([self.fd], [], [], max(0.0, left))[0]
                if not ready:
                    self.failed = "took over %gs" % timeout
                    break
                block = os.read(self.fd, 1 << 20)
                if not block:
                    break
                chunks.append(block)
                total += len(block)
                if total > ANSWER_CAP:
                    self.failed = "answered more than %d MiB" % (ANSWER_CAP >> 20)
                    break
        finally:
            os.close(self.fd)
            self.fd = -1
            if self.failed is not None:
                self._reap()
            else:
                _ENDING.append(self.pid)  # it answered and is on its way out (_child)
        if self.failed is not None:
            return None
        try:  # written by this same interpreter (_child): marshal, the fastest both ways
            answer = marshal.loads(b"".join(chunks))
        except (ValueError, EOFError, TypeError):
            answer = None
        if type(answer) is not dict or ("value" not in answer and "error" not in answer):
            self.failed = "ended without an answer"
            return None
        if "error" in answer:
            self.failed = str(answer["error"])
            return None
        return answer["value"]

    def stop(self) -> None:
        """Kill the child and collect it (its answer is not wanted); nothing once its
        answer was read (result() collected it: its pid may be another's by now)."""
        if self.fd < 0:
            return
        os.close(self.fd)
        self.fd = -1
        self._reap()

    def _reap(self) -> None:
        """Kill the child and collect it (its answer came late, or is not wanted)."""
        try:
            os.kill(self.pid, _signals().SIGKILL)
        except OSError:
            pass
        _collected(self.pid, 0.005)


# Children that answered, not yet collected: each closed its answer's pipe and is ending,
# and the kernel frees its copy of the probe's memory meanwhile (a millisecond, which the
# report no longer waits for). collect() waits for them once the report is written.
_ENDING: List[int] = []


def collect() -> None:
    """Collect the children that answered."""
    while _ENDING:
        _collected(_ENDING.pop(), 0.0005)


def _collected(pid: int, pause: float) -> None:
    """Collect the child ``pid``, looked at every ``pause`` seconds and waited on for
    REAP_SECONDS at most: one stuck in the kernel (a hung NFS server) dies when its call
    returns, and is never waited on longer."""
    deadline = time.monotonic() + REAP_SECONDS
    while True:
        try:
            done = os.waitpid(pid, os.WNOHANG)[0]
        except OSError:  # ChildProcessError: collected already
            return
        if done or time.monotonic() > deadline:
            return
        time.sleep(pause)


def _child(work: Callable[[], Any], read_fd: int, write_fd: int, seconds: Optional[float]) -> None:
    import gc

    signal = _signals()
    gc.disable()
    code = 1
    try:
        if seconds is not None:
            # Its own end, REAP_SECONDS past the parent's deadline: a parent killed alone
            # (the OOM killer's pick, a kill of its pid) is no longer there to kill it.
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.0) + REAP_SECONDS)
        os.close(read_fd)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # never the report's pipe
            os.dup2(null, fd)
        try:
            answer: Tuple[str, Any] = ("value", work())
        except Exception as exc:  # the parent says it; a traceback would go nowhere
            answer = ("error", "%s: %s" % (type(exc).__name__, exc))
        try:
            data = marshal.dumps(dict([answer]))
        except ValueError as exc:  # not plain data: said, not an answer lost
            data = marshal.dumps({"error": "the answer is not plain data: %s" % exc})
        write_all(write_fd, data)
        os.close(write_fd)  # the answer's end now, not once this copy's memory is freed
        code = 0
    finally:
        os._exit(code)


def _signals() -> Any:
    """The signal functions and numbers: signal's C module where there is one (signal.py
    imports enum, a few ms in each child, on the way to the check's answer)."""
    try:
        import _signal  # type: ignore[import-not-found]  # (signal.py is its typed face)

        return _signal
    except ImportError:
        import signal

        return signal
