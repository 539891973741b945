"""The target interpreter started before the host knows the probe's argument (boot()).

A plain local ``snapshot``, ``diff``, ``check``, ``guard`` or ``undo`` names its interpreter;
prestart starts it at once with the target package (payload.booting_payload), and it loads
that and takes its first steps (main.begin) while the host imports what builds the
argument. The first local ProbeRun of that interpreter takes it over (take_boot()) and sends
only the argument. This module is on the way to that start: the standard library's cheaper
half only (subprocess is not imported on Linux: lifecycle.spawn_piped).
"""

from __future__ import annotations

import _thread
import os
import sys
import time

from envguard.lifecycle import (
    MARKER,
    end_chain,
    forget,
    new_marker,
    spawn_piped,
    start_child,
    suppress,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from threading import Thread

    from envguard.lifecycle import Child

# A booted interpreter's command line: it reads a length line, then that many bytes of
# program (payload.booting_payload), and runs them; any Python parses it (2.x included, so
# the version check answers there as it does on stdin). The payload's module loads once the
# interpreter started (its imports were half a millisecond before that start).
BOOT = "import sys;_b=getattr(sys.stdin,'buffer',sys.stdin);exec(_b.read(int(_b.readline())))"

# Linux's fcntls that size a pipe (fcntl.F_SETPIPE_SZ and F_GETPIPE_SZ from Python 3.10).
_F_SETPIPE_SZ, _F_GETPIPE_SZ = 1031, 1032
# The most a pipe is grown to (the kernel's default pipe-max-size, which root may pass):
# kernel memory held at once, where a thread streams the rest.
_PIPE_MOST = 1 << 20


def written_now(proc: Child, data: bytes) -> int:
    """How much of ``data`` went into ``proc``'s stdin pipe at once, without waiting (0
    where none did). The pipe is grown to hold all of it where Linux lets it (a pipe
    holds 64 KiB, and the booted program is about 200 KiB): then the whole program is in
    the pipe the moment the interpreter starts, and no thread of this process, waiting
    for the GIL while the command line imports its modules, is between them (up to the
    switch interval, 5 ms, each time a blocked write resumed). What is left is written by
    a thread, as ever."""
    stdin = proc.stdin
    if stdin is None or not data:
        return 0
    try:
        fd = stdin.fileno()
        if sys.platform == "linux":
            import fcntl

            with suppress(OSError):  # over the user's pipe limits: it keeps its size
                size = min(len(data), _PIPE_MOST)
                if fcntl.fcntl(fd, _F_GETPIPE_SZ) < size:  # grown, never shrunk
                    fcntl.fcntl(fd, _F_SETPIPE_SZ, size)  # the kernel rounds it up
        os.set_blocking(fd, False)
        try:
            return os.write(fd, data)
        finally:
            os.set_blocking(fd, True)
    except (OSError, ValueError):
        return 0  # a full pipe (or a closed one): the thread writes it, or says so


class _Booted:
    """An interpreter started early with the target package (boot()): it loads that while
    the host still imports what building the probe's argument needs, then waits for it."""

    def __init__(self, python: str, entry: str) -> None:
        from envguard import trace

        argv = [python, "-I", "-S", "-c", BOOT]
        token, self.marker = new_marker()
        self.python, self.entry = python, entry
        self.started = trace.command("probe", argv)
        env = {**os.environ, MARKER: token}
        proc: Child | None = spawn_piped(argv, marker=self.marker, env=env)
        if proc is None:  # not Linux: started as ProbeRun starts a probe
            import subprocess

            pipe = subprocess.PIPE
            proc = start_child(
                argv, marker=self.marker, stdin=pipe, stdout=pipe, stderr=pipe, env=env
            )
        self.proc = proc
        self.cancelled = False
        from envguard.probe.payload import booting_payload

        data = booting_payload(entry)
        left = data[written_now(proc, data) :]
        self.feeder: Thread | None = None  # the thread writing the rest, if any
        if left:
            import threading  # once it runs: its import is not on the way to the start

            self.feeder = threading.Thread(target=self._send, args=(left,), daemon=True)
            self.feeder.start()

    def _send(self, data: bytes) -> None:
        """Write the program and leave the pipe open (a ProbeRun that takes the boot over
        writes the argument, then closes it); closed here when nothing more can be written
        or the boot was stopped meanwhile."""
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(data)
            stdin.flush()
        except (OSError, ValueError):
            self.cancelled = True
        if self.cancelled:
            with suppress(OSError, ValueError):
                stdin.close()

    def cancel(self) -> None:
        """Stop it and collect it: no probe took it over. Its stdin is left to the thread
        still writing the program into it, if any (a descendant in a session of its own
        may hold the pipe open): closing it would wait for that write (ProbeRun's
        _close_pipes leaves a pipe to its reader the same way)."""
        self.cancelled = True  # a program still being written: its thread closes the pipe
        try:
            end_chain(self.proc, marker=self.marker)
        finally:
            forget(self.proc.pid)
            if self.feeder is not None:
                self.feeder.join(0.1)
            pipes = [self.proc.stdout, self.proc.stderr]  # no reader: nothing waits on them
            if self.feeder is None or not self.feeder.is_alive():
                pipes.append(self.proc.stdin)
            for pipe in pipes:
                if pipe is not None:
                    with suppress(OSError, ValueError):
                        pipe.close()


_BOOTS: list[_Booted] = []
_BOOTS_LOCK = _thread.allocate_lock()
# A boot older than this is not taken over: what it read first (main.begin) may have changed
# since. The command line takes its boot over within a fraction of a second.
BOOT_FRESH_SECONDS = 5.0


def boot(python: str, *, entry: str = "main") -> None:
    """Start ``python`` (a local interpreter) with the target package now, so that its start
    overlaps the host's own imports; the first local ProbeRun of that interpreter and entry
    takes it over, and any other local ProbeRun stops it (stop_boots() at the latest). A
    wrong guess costs CPU, never a wrong answer: a boot is only ever the program a ProbeRun
    would have sent, and its argument the one that ProbeRun was given."""
    booted = _Booted(python, entry)
    with _BOOTS_LOCK:
        if not _BOOTS_AT_EXIT:
            import atexit

            atexit.register(stop_boots)  # a library caller's boot never taken over
            _BOOTS_AT_EXIT.append(True)
        _BOOTS.append(booted)


_BOOTS_AT_EXIT: list[bool] = []


def take_boot(python: str, entry: str) -> _Booted | None:
    """The boot of ``python`` for ``entry``, if any; every other boot is stopped."""
    with _BOOTS_LOCK:
        if not _BOOTS:
            return None
        boots = _BOOTS[:]
        _BOOTS.clear()
    taken = None
    for booted in boots:
        fresh = time.monotonic() - booted.started < BOOT_FRESH_SECONDS
        if taken is None and fresh and (booted.python, booted.entry) == (python, entry):
            taken = booted
        else:
            booted.cancel()
    return taken


def stop_boots() -> None:
    """Stop the boots no ProbeRun took over."""
    with _BOOTS_LOCK:
        boots = _BOOTS[:]
        _BOOTS.clear()
    for booted in boots:
        booted.cancel()
