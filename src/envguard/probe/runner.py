"""Run the probe in the target interpreter (behind a --via prefix when remote)."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable, Sequence

from envguard.errors import ProbeError, UsageError
from envguard.lifecycle import (
    MARKER,
    TERM_GRACE,
    end_chain,
    forget,
    kill_group,
    kill_strays,
    new_marker,
    raise_if_signalled,
    start_child,
)
from envguard.probe.booting import take_boot, written_now
from envguard.probe.payload import probe_argument, probe_payload

# typing (and pathlib) are left to load once the probe runs: this module is on the way to
# the early probe's start (envguard.api.early).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping
    from pathlib import Path
    from typing import IO, Any, TypeVar

    from envguard.lifecycle import Child
    from envguard.probe.report_shape import ProbeReport

    T = TypeVar("T")

# What a remote interpreter path may contain: it may pass through a remote shell unquoted.
_SAFE_PYTHON = re.compile(r"^[A-Za-z0-9_./+-]+$")
# Past this the output is not a report: stop reading (and the probe) instead of buffering.
OUTPUT_CAP = 64 << 20
_STDERR_TAIL = 64 << 10
# How often a wait looks for an interrupt whose exception was lost (raise_if_signalled).
_POLL = 0.25


def probe_argv(python: str, *, prefix: Sequence[str] = ()) -> list[str]:
    """The argv that runs the probe (behind ``prefix`` when remote); the program is stdin.

    ``-I`` ignores PYTHON* variables and the user site; ``-S`` skips site.py, so no .pth
    file of the target runs (site-packages paths come from sysconfig instead).
    """
    if prefix and (not _SAFE_PYTHON.match(python) or python.startswith("-")):
        raise UsageError(f"--python {python!r}: a remote interpreter path must be a plain path")
    if any(os.path.basename(token) == "pdsh" for token in prefix):
        # pdsh never forwards stdin: the far python would wait for its program until the
        # timeout. Said now, not in 120 s.
        raise UsageError(
            f"--via {shlex.join(prefix)}: pdsh passes no stdin, and the probe travels on stdin",
            hint="use clush -w HOST or ssh HOST as the prefix; for many nodes at once, the pdsh"
            " recipe runs `envguard probe-payload` through pdcp and pdsh (examples/fleet)",
        )
    return [*prefix, python, "-I", "-S", "-"]


# Container engines whose exec forwards stdin only when asked (-i).
_EXEC_NEEDS_I = ("docker", "podman", "nerdctl", "kubectl", "oc", "crictl")


def no_stdin(prefix: Sequence[str]) -> str:
    """Why a far side answered nothing and said nothing (exit 0): its python read an empty
    program, because the prefix passed it no stdin. Names the flag when the tool is known."""
    for i, token in enumerate(prefix):
        tool = os.path.basename(token)
        if tool in _EXEC_NEEDS_I and "exec" in prefix[i + 1 :]:
            flags = [t for t in prefix[i + 1 :] if t.startswith("-")]
            if not any(
                f in ("--interactive", "--stdin") or (not f.startswith("--") and "i" in f[1:])
                for f in flags
            ):
                return f"the prefix passed no stdin: {tool} exec needs -i"
    return "the prefix passed no stdin to python (a container's exec needs -i)"


class _Reader(threading.Thread):
    """Reads one pipe to its end, keeping at most ``cap`` bytes: the first ``cap`` (then
    ``on_overflow`` runs once) or, with ``keep_tail``, the last ``cap``.

    Past the cap the bytes are read and dropped, never left in the pipe: a writer the kill
    did not reach (a far side's process in a session of its own) would block on a full pipe,
    and what it says last (why it failed) would never arrive."""

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
                if not self.overflow:
                    self._keep(block)

    def _keep(self, block: bytes) -> None:
        if self.sink is not None:
            self.written += len(block)
            if self.written > self.cap:
                self._overflowed()
                return
            self.sink.write(block)
            return
        self.data += block
        if len(self.data) > self.cap:
            if not self.keep_tail:
                self._overflowed()
                return
            del self.data[: len(self.data) - self.cap]

    def _overflowed(self) -> None:
        self.overflow = True
        self.on_overflow()


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
        self.remote, self.prefix = bool(prefix), tuple(prefix)
        self.timeout = timeout
        self.proc: Child
        booted = None if prefix else take_boot(str(python), entry)
        after: threading.Thread | None = None
        if booted is not None:
            # Started by boot() with the target package; only its argument is left to send.
            self.proc, self.marker, self._started = booted.proc, booted.marker, booted.started
            payload, after = probe_argument(args, entry).encode(), booted.feeder
        else:
            argv = probe_argv(str(python), prefix=prefix)
            token, self.marker = new_marker()
            from envguard import trace

            self._started = trace.command("probe", argv)
            self._start(argv, token)
            payload = probe_payload(args, entry=entry).encode()
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.output_cap = output_cap
        self._out = _Reader(self.proc.stdout, output_cap, on_overflow=self._kill, sink=sink)
        self._err = _Reader(self.proc.stderr, _STDERR_TAIL, keep_tail=True)
        threads: list[threading.Thread] = [self._out, self._err]
        if after is None:
            # Into a pipe grown to hold it (booting.written_now): written now, not by a
            # thread waiting for the GIL meanwhile; a booted program is in it already.
            payload = payload[written_now(self.proc, payload) :]
            if not payload:
                with contextlib.suppress(OSError, ValueError):
                    self.proc.stdin.close()  # type: ignore[union-attr]
        self._feeder = threading.Thread(target=self._feed, args=(payload, after), daemon=True)
        if payload:
            threads.insert(0, self._feeder)
        for thread in threads:
            thread.start()

    def _start(self, argv: list[str], token: str) -> None:
        """Start the probe in a session of its own, registered for kill_running() (the
        whole chain, ssh, pct exec, ..., dies at once; a signal never orphans it)."""
        try:
            self.proc = _spawn(argv, token, self.marker, adopts=self.remote)
        except OSError as exc:
            what = "the prefix" if self.remote else "it as a Python interpreter"
            why = exc.strerror or exc
            raise ProbeError(f"{self.label}: cannot run {what} ({why})") from None

    def _feed(self, payload: bytes, after: threading.Thread | None) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            if after is not None:
                after.join()  # the booted interpreter's program goes first
            stdin.write(payload)
        except (OSError, ValueError):
            pass  # the target ended early: result() reports what it said
        finally:
            with contextlib.suppress(OSError, ValueError):
                stdin.close()

    def _kill(self) -> None:
        kill_group(self.proc.pid)

    def _reap(self) -> None:
        """Kill the probe's group (and what it started in other sessions) and collect it,
        never waiting long on inherited pipes."""
        grace = TERM_GRACE if self.remote else 0.0  # a prefix gets to clean up (srun)
        end_chain(self.proc, marker=self.marker, adopts=self.remote, grace=grace)
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
            forget(self.proc.pid)

    def _wait(self, ended: Callable[[], None] | None = None) -> None:
        """Wait for the probe in short slices, so an interrupt whose exception CPython lost
        (lifecycle.raise_if_signalled) still stops the wait; TimeoutExpired past the timeout.

        Each slice waits on the reader of the probe's stdout, which ends the moment the
        probe closes it (``Popen.wait(timeout)`` polls with growing sleeps, which a snapshot
        would sit out); then the probe itself is collected. ``ended``: called once when its
        stdout ended before the process did (the probe closes it once its report is
        written, and the kernel then frees its memory: a millisecond to use)."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            raise_if_signalled()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise _expired()(self.proc.args, self.timeout or 0)
            slice_ = _POLL if left is None else min(left, _POLL)
            if self._out.is_alive() and self.proc.poll() is None:
                self._out.join(slice_)
                if self._out.is_alive():
                    continue  # still talking (or its output is held open: polled above)
            if ended is not None and self.proc.returncode is None:
                ended()  # its stdout ended (before this wait looked, or during it)
                ended = None
            try:
                self.proc.wait(timeout=slice_)
                return
            except BaseException as exc:
                if not _timed_out(exc):
                    raise

    def _said(self) -> str:
        """The last line the program wrote on stderr, redacted and printable."""
        from envguard.redact import redact_text  # loaded once the probe runs

        text = redact_text(bytes(self._err.data).decode("utf-8", "replace")).strip()
        last = text.splitlines()[-1] if text else ""
        return "".join(c if c.isprintable() else "?" for c in last)[:300]

    def result(self) -> ProbeReport:
        """Wait for the report; ProbeError for a timeout, a failure or a bad report."""
        return self.result_then(_same)

    def result_then(self, then: Callable[[ProbeReport], T]) -> T:
        """``then(report)``, run while the probe's process still ends once its stdout ended
        with the report (the probe closes it once the report is written; the kernel then
        frees its memory, a millisecond and more), else once it ended. Either way what
        ``then`` returns or raises counts only as result() would: the exit 0, the same
        bytes. ProbeError as result()'s."""
        from envguard.probe.report import parse_report

        read: list[tuple[bytes, Callable[[], T]]] = []

        def ended() -> None:
            """The report read as it would be read after an exit 0, and ``then`` of it."""
            if self._out.overflow:
                return
            data = bytes(self._out.data)
            try:
                report = parse_report(data, **shared, returncode=0, stderr_tail="")
                value = then(report)
            except Exception as exc:  # (ProbeError, then's): raised if it counts
                read.append((data, _raising(exc)))
            else:
                read.append((data, lambda: value))

        shared: dict[str, Any] = {"label": self.label, "remote": self.remote}
        data, stderr = self.output(ended)
        returncode = self.proc.returncode
        assert returncode is not None  # output() collected it
        if self.remote and not data.strip() and not stderr.strip() and returncode == 0:
            raise ProbeError(f"{self.label}: no answer and no error: {no_stdin(self.prefix)}")
        if returncode == 0 and read and read[0][0] == data:
            return read[0][1]()
        report = parse_report(
            data,
            label=self.label,
            returncode=returncode,
            stderr_tail=stderr,
            remote=self.remote,
        )
        return then(report)

    def output(self, ended: Callable[[], None] | None = None) -> tuple[bytes, str]:
        """Wait for the program to end: (its stdout, the tail of its stderr, redacted);
        ProbeError for a timeout or output past the cap. ``ended``: as _wait's."""
        with contextlib.suppress(ImportError):  # lifecycle.Spawned waits with it, if any,
            import select  # noqa: F401  # once the report is in

        from envguard.redact import redact_text  # loaded before the answer, not after it

        proc = self.proc
        try:
            self._wait(ended)
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
        except BaseException as exc:
            if not _timed_out(exc):
                self._reap()
                raise
            said = self._said()  # what the prefix said while it ran (an engine's own error)
            self._reap()
            raise ProbeError(
                f"{self.label}: no answer within {self.timeout:g}s"
                + (f"; it said: {said}" if said else "")
            ) from None
        finally:
            forget(proc.pid)
            self._close_pipes()
        from envguard import trace

        trace.done(f"probe ({self.label}), {len(self._out.data)} bytes", self._started)
        # What the far side (or a local interpreter) says on stderr goes into error lines: it
        # passes the one redaction here, so no caller can print it unredacted.
        said = bytes(self._err.data).decode("utf-8", "replace")
        return bytes(self._out.data), redact_text(said)


def _same(report: ProbeReport) -> ProbeReport:
    return report


def _raising(exc: Exception) -> Callable[[], Any]:
    def again() -> Any:
        raise exc

    return again


def _expired() -> type[subprocess.TimeoutExpired]:
    """subprocess.TimeoutExpired, imported when a wait ran out: a local probe on Linux needs
    nothing else of subprocess, whose imports (locale, signal, selectors) cost a snapshot's
    own process 3 ms of CPU while the probe needs both cores (lifecycle.spawn_piped)."""
    import subprocess

    return subprocess.TimeoutExpired


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is subprocess.TimeoutExpired, told without importing subprocess: an
    exception being matched must not start an import, which a second signal could
    interrupt past the clean-up (the probe left running, its reader's pipe closed under
    it). Where subprocess is not loaded, no such exception was raised."""
    loaded = sys.modules.get("subprocess")
    return loaded is not None and isinstance(exc, loaded.TimeoutExpired)


def _spawn(
    argv: list[str], token: str, marker: bytes, *, adopts: bool = False
) -> subprocess.Popen[bytes]:
    """A probe's process: its three pipes, the marker in its environment (lifecycle)."""
    import subprocess

    return start_child(
        argv,
        marker=marker,
        adopts=adopts,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, MARKER: token},
    )
