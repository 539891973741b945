"""Errors the CLI turns into a one-line message and an exit code; anything else is a bug."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator


class EnvguardError(Exception):
    """A failure the user can act on: a message, an optional hint, and an exit code."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def field_path(loc: tuple[int | str, ...]) -> str:
    """``packages.0.version`` for a validation error's location, always one printable line:
    keys in untrusted input may hold newlines or escape codes."""
    parts = [p if isinstance(p, str) and p.isprintable() else repr(p) for p in loc]
    return ".".join(str(p) for p in parts) or "top level"


class UsageError(EnvguardError):
    """Bad usage or bad input: exit 2."""


class SnapshotError(EnvguardError):
    """A snapshot file that is missing, corrupt or of an unknown schema: exit 2."""


class ProbeError(EnvguardError):
    """The target interpreter could not be measured: exit 2."""


class ActionError(EnvguardError):
    """An action (rebuild, fleet capture) that failed part-way: exit 1."""

    exit_code = 1


# What a signal must not hide: set once something the user needs to know became true (a
# rebuilt venv swapped in, the old one moved aside) and cleared once it was reported. The CLI
# prints it as the hint of its `error: interrupted` line, wherever the signal lands.
_interrupt_hint: list[str] = []


def set_interrupt_hint(text: str | None) -> None:
    _interrupt_hint[:] = [text] if text else []


def interrupt_hint() -> str | None:
    return _interrupt_hint[0] if _interrupt_hint else None


# Signals received by the CLI's handlers. The KeyboardInterrupt a handler raises can be lost
# (CPython ignores exceptions raised inside weakref callbacks, e.g. importlib's module-lock
# clean-up), so the CLI also asks here before it reports anything else.
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
        raise Terminated(signum)


class _Depth(threading.local):
    """How deep this thread is in a block (cleaning_up, signals_deferred)."""

    depth = 0

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1


# Per thread: one thread's clean-up must not let another thread (a fleet's worker) go on
# starting and waiting for remote work after the interrupt.
_CLEANING = _Depth()


@contextlib.contextmanager
def cleaning_up() -> Iterator[None]:
    """Waits inside, in this thread, do not stop for a signal already received (a far
    side's staged file is removed after an interrupt, not left behind)."""
    with _CLEANING.entered():
        yield


def on_signal(signum: int, frame: object) -> None:
    """The handler for SIGINT, SIGTERM and SIGHUP: noted (a wait that CPython could not
    interrupt raises it later) and raised as an interrupt, so the same clean-up runs; only
    noted inside signals_deferred()."""
    note_signal(signum)
    if not _DEFERRING.depth:
        raise Terminated(signum)


# Per thread, though only the main thread's matters: CPython runs handlers there.
_DEFERRING = _Depth()


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """A signal inside is noted and raised once the block is left: a child process is
    started and registered for clean-up, or not started, never orphaned in between (an
    interrupt raised inside ``Popen``, after the fork, lost the child's pid)."""
    with _DEFERRING.entered():
        yield
    raise_if_signalled()


def handle_signals() -> None:
    """Install on_signal for SIGINT, SIGTERM and SIGHUP (before anything is started), and
    the hook that keeps an interrupt CPython could not raise from printing a traceback."""
    import signal

    sys.unraisablehook = _unraisable
    for signum in catchable_signals():
        signal.signal(signum, on_signal)


def catchable_signals() -> list[int]:
    """SIGINT, SIGTERM and SIGHUP, less those this process was started ignoring: `nohup
    envguard ...` ignores SIGHUP (a closed terminal must not stop it), a script's background
    job ignores SIGINT; envguard never turns them back on."""
    import signal

    return [
        s
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        if signal.getsignal(s) is not signal.SIG_IGN
    ]


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
    if isinstance(exc, Terminated):
        return exc.signum
    signum = received_signal()
    if signum is None and isinstance(exc, KeyboardInterrupt):
        import signal

        return signal.SIGINT
    return signum


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so the same clean-up runs (probes killed,
    partial files removed); the CLI exits 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
