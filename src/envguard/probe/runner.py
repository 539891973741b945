"""Run the probe in the target interpreter (behind a --via prefix when remote)."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from envguard.errors import ProbeError, UsageError, raise_if_signalled, signals_deferred
from envguard.probe.payload import probe_payload

if TYPE_CHECKING:
    from envguard.probe.report import ProbeReport

# Probes running now (process group id -> the marker in their environment), so an interrupt
# can stop them all.
_RUNNING: dict[int, bytes] = {}
_RUNNING_LOCK = threading.Lock()
# What a remote interpreter path may contain: it may pass through a remote shell unquoted.
_SAFE_PYTHON = re.compile(r"^[A-Za-z0-9_./+-]+$")
# Past this the output is not a report: stop reading (and the probe) instead of buffering.
OUTPUT_CAP = 64 << 20
_STDERR_TAIL = 64 << 10
# How often a wait looks for an interrupt whose exception was lost (errors.raise_if_signalled).
_POLL = 0.25


def kill_running() -> None:
    """Kill every probe still running (and whatever its prefix started): Ctrl-C on a fleet."""
    with _RUNNING_LOCK:
        groups = list(_RUNNING.items())
    for pgid, marker in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        kill_strays(marker)
    # The killed chains' orphans come to envguard as they die, when it is their subreaper
    # (a --via probe made it one); a local probe leaves none, and Ctrl-C is not kept waiting.
    if groups and _SUBREAPER:
        for _ in range(3):
            time.sleep(0.05)
            kill_adopted()


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
    probe chains (see _become_subreaper). Probes still running are left alone."""
    me = os.getpid()
    with _RUNNING_LOCK:
        ours = set(_RUNNING)
    try:
        with os.scandir("/proc") as scan:
            entries = [e.name for e in scan if e.name.isdigit()]
    except OSError:
        return
    for name in entries:
        pid = int(name)
        if pid in ours:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and int(fields[1]) == me and pid not in _STARTED:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)


# Every probe leader envguard started (live or reaped): never mistaken for an adopted orphan.
_STARTED: set[int] = set()


# Every probe's chain carries this variable with a value of its own. A process the chain
# started in a session of its own (a --via that daemonises) is outside the killed process
# group, but it keeps the variable: on a timeout or an interrupt it is found by it.
MARKER = "ENVGUARD_PROBE_RUN"


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
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def probe_argv(python: str, *, prefix: Sequence[str] = ()) -> list[str]:
    """The argv that runs the probe (behind ``prefix`` when remote); the program is stdin.

    ``-I`` ignores PYTHON* variables and the user site; ``-S`` skips site.py, so no .pth
    file of the target runs (site-packages paths come from sysconfig instead).
    """
    if prefix and (not _SAFE_PYTHON.match(python) or python.startswith("-")):
        raise UsageError(f"--python {python!r}: a remote interpreter path must be a plain path")
    return [*prefix, python, "-I", "-S", "-"]


class _Reader(threading.Thread):
    """Reads one pipe to its end, keeping at most ``cap`` bytes: the first ``cap`` (then
    ``on_overflow`` runs and reading stops) or, with ``keep_tail``, the last ``cap``."""

    def __init__(
        self,
        pipe: IO[bytes],
        cap: int,
        *,
        keep_tail: bool = False,
        on_overflow: Callable[[], None] = lambda: None,
        sink: IO[bytes] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.pipe, self.cap, self.keep_tail, self.on_overflow = pipe, cap, keep_tail, on_overflow
        self.data = bytearray()
        self.overflow = False
        self.sink, self.written = sink, 0  # a sink takes the bytes instead of memory

    def run(self) -> None:
        read = getattr(self.pipe, "read1", self.pipe.read)
        with contextlib.suppress(OSError, ValueError):
            while block := read(65536):
                if self.sink is not None:
                    self.written += len(block)
                    if self.written > self.cap:
                        self.overflow = True
                        self.on_overflow()
                        return
                    self.sink.write(block)
                    continue
                self.data += block
                if len(self.data) > self.cap:
                    if not self.keep_tail:
                        self.overflow = True
                        self.on_overflow()
                        return
                    del self.data[: len(self.data) - self.cap]


class ProbeRun:
    """A probe started in the background, so it works while envguard imports its own heavy
    modules; ``result()`` waits for its validated report (or raises ProbeError)."""

    def __init__(
        self,
        python: Path | str,
        args: Mapping[str, Any],
        *,
        label: str | None = None,
        prefix: Sequence[str] = (),
        timeout: float | None = None,
        entry: str = "main",
        output_cap: int = OUTPUT_CAP,
        sink: IO[bytes] | None = None,
    ) -> None:
        self.label = label or (f"--via {shlex.join(prefix)}" if prefix else f"--python {python}")
        self.remote = bool(prefix)
        self.timeout = timeout
        argv = probe_argv(str(python), prefix=prefix)
        if prefix:
            _become_subreaper()
        token = os.urandom(8).hex()
        self.marker = f"{MARKER}={token}".encode()
        from envguard import trace

        self._started = trace.command("probe", argv)
        self._start(argv, token)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.output_cap = output_cap
        self._out = _Reader(self.proc.stdout, output_cap, on_overflow=self._kill, sink=sink)
        self._err = _Reader(self.proc.stderr, _STDERR_TAIL, keep_tail=True)
        self._feeder = threading.Thread(
            target=self._feed, args=(probe_payload(args, entry=entry).encode(),), daemon=True
        )
        for thread in (self._feeder, self._out, self._err):
            thread.start()

    def _start(self, argv: list[str], token: str) -> None:
        """Start the probe in a session of its own (a timeout or an interrupt kills the
        whole chain, ssh, pct exec, ..., at once) and register it for kill_running().

        A signal in between is held until it is registered (errors.signals_deferred); in
        a worker thread (fleet), the main thread's clean-up may have run already, so a
        probe started after the signal is killed here."""
        try:
            with signals_deferred():
                try:
                    self.proc = subprocess.Popen(
                        argv,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        start_new_session=True,
                        env={**os.environ, MARKER: token},
                    )
                except OSError as exc:
                    what = "the prefix" if self.remote else "it as a Python interpreter"
                    why = exc.strerror or exc
                    raise ProbeError(f"{self.label}: cannot run {what} ({why})") from None
                with _RUNNING_LOCK:
                    _RUNNING[self.proc.pid] = self.marker
                    _STARTED.add(self.proc.pid)
        except BaseException:  # an interrupt, or rebuild's own (its signal gate's Interrupted)
            if hasattr(self, "proc"):
                with contextlib.suppress(OSError, ValueError):
                    self._end_chain()
                    for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                        if pipe is not None:
                            pipe.close()
                with _RUNNING_LOCK:
                    _RUNNING.pop(self.proc.pid, None)
            raise

    def _feed(self, payload: bytes) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(payload)
        except (OSError, ValueError):
            pass  # the target ended early: result() reports what it said
        finally:
            with contextlib.suppress(OSError, ValueError):
                stdin.close()

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def _end_chain(self) -> None:
        """Kill the probe's group, what it started in other sessions (by its marker, or
        adopted by envguard as their subreaper), and collect it."""
        self._kill()
        kill_strays(self.marker)
        self.proc.wait()
        if self.remote:
            kill_adopted()  # the chain's orphans, now that its leader is gone

    def _reap(self) -> None:
        """Kill the probe's group (and what it started in other sessions) and collect it,
        never waiting long on inherited pipes."""
        self._end_chain()
        for reader in (self._out, self._err):
            reader.join(2)  # a descendant in another session may hold a pipe: do not wait
        self._close_pipes()

    def _close_pipes(self) -> None:
        # A pipe whose reader is still blocked in read() (a descendant in another session
        # holds it open) is left to that daemon thread: closing it would wait for the read.
        for pipe, reader in ((self.proc.stdout, self._out), (self.proc.stderr, self._err)):
            if pipe is not None and not reader.is_alive():
                with contextlib.suppress(OSError, ValueError):
                    pipe.close()

    def cancel(self) -> None:
        """Stop the probe: its result is no longer wanted (a no-op once it was collected)."""
        if self.proc.returncode is not None:
            return  # reaped already: its pid may belong to someone else now
        try:
            self._reap()
        except (OSError, ValueError):
            pass  # the caller is already on its way out with the error that matters
        finally:
            with _RUNNING_LOCK:
                _RUNNING.pop(self.proc.pid, None)

    def _wait(self) -> None:
        """Wait for the probe in short slices, so an interrupt whose exception CPython lost
        (errors.raise_if_signalled) still stops the wait; TimeoutExpired past the timeout.

        Each slice waits on the reader of the probe's stdout, which ends the moment the
        probe closes it (``Popen.wait(timeout)`` polls with sleeps of up to 50 ms, and that
        was a tenth of a snapshot); then the probe itself is collected."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            raise_if_signalled()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.proc.args, self.timeout or 0)
            slice_ = _POLL if left is None else min(left, _POLL)
            if self._out.is_alive() and self.proc.poll() is None:
                self._out.join(slice_)
                if self._out.is_alive():
                    continue  # still talking (or its output is held open: polled above)
            try:
                self.proc.wait(timeout=slice_)
                return
            except subprocess.TimeoutExpired:
                continue

    def result(self) -> ProbeReport:
        """Wait for the report; ProbeError for a timeout, a failure or a bad report."""
        from envguard.probe.report import parse_report

        data, stderr = self.output()
        return parse_report(
            data,
            label=self.label,
            returncode=self.proc.returncode,
            stderr_tail=stderr,
            remote=self.remote,
        )

    def output(self) -> tuple[bytes, str]:
        """Wait for the program to end: (its stdout, the tail of its stderr); ProbeError
        for a timeout or output past the cap."""
        proc = self.proc
        try:
            self._wait()
            # The probe has ended; a process it left behind (a --via that daemonised) may
            # still hold the pipes open: read what came, then stop that group too.
            self._out.join(5)
            if self._out.is_alive():
                self._kill()
                kill_strays(self.marker)  # one that left the group (setsid) keeps the marker
                self._out.join(1)
            self._err.join(1)
            if self._out.overflow:
                raise ProbeError(
                    f"{self.label}: output larger than {self.output_cap} bytes; stopped"
                )
        except subprocess.TimeoutExpired:
            self._reap()
            raise ProbeError(f"{self.label}: no answer within {self.timeout:g}s") from None
        except BaseException:
            self._reap()
            raise
        finally:
            with _RUNNING_LOCK:
                _RUNNING.pop(proc.pid, None)
            self._close_pipes()
        from envguard import trace

        trace.done(f"probe ({self.label}), {len(self._out.data)} bytes", self._started)
        return bytes(self._out.data), bytes(self._err.data).decode("utf-8", "replace")
