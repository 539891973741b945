"""The rank gate's store, with deadlines of envguard's own.

torch's TCPStore honours a wait's timeout only while its server answers: once the server is
frozen (SIGSTOP, a hung host) or the link to it is down, the client sends its "stop
waiting" and then reads the reply forever, holding the client's one lock so that every later
call blocks behind it. So every call the gate makes runs in a daemon thread that the
caller stops waiting for at a deadline measured here, with ``time.monotonic``: a call that
has not returned by then, or that fails on the connection, marks the store gone, and every
later call fails at once without touching it. The blocked thread is left behind (a thread
cannot be stopped); it holds no lock of ours and dies with the process.

torch is imported only by :func:`tcp_store`.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Protocol, TypeVar

from envguard.errors import UsageError

# How long past its own timeout a wait may take before the store counts as not answering
# (a live server answers a timed-out wait with one round trip).
ANSWER = 1.0

_T = TypeVar("_T")


class Store(Protocol):
    """What the gate uses of a ``torch.distributed.Store`` (TCPStore, FileStore, ...)."""

    def set(self, key: str, value: str | bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...
    def wait(self, keys: list[str], timeout: timedelta) -> None: ...


class StoreGoneError(Exception):
    """The store stopped answering (``frozen``: a call outlived its deadline) or lost its
    connection; ``reason`` says which, in a few words."""

    def __init__(self, reason: str, *, frozen: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.frozen = frozen


class Deadline:
    """A point in ``time.monotonic``'s time, ``seconds`` from when it was made."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()
        self.end = self.start + seconds

    def remaining(self, floor: float = 0.0) -> float:
        return max(floor, self.end - time.monotonic())

    def left(self, floor: float = 0.05) -> timedelta:
        return timedelta(seconds=self.remaining(floor))

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return "".join(c if c.isprintable() else "?" for c in line)[:120]


def bounded(call: Callable[[], _T], limit: float) -> _T:
    """``call()``'s result, or :class:`StoreGoneError` when it has not returned within
    ``limit`` seconds (the call goes on in its daemon thread, abandoned)."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="envguard-gate-store", daemon=True)
    thread.start()
    thread.join(max(0.0, limit))
    if thread.is_alive():
        raise StoreGoneError(f"no answer within {limit:.1f} s", frozen=True)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]  # an exception, stored just above
    return box["value"]  # type: ignore[return-value]  # call()'s own value


class BoundedStore:
    """A store whose every call ends by envguard's deadline: a wait by its own timeout plus
    :data:`ANSWER`, any other call by ``deadline`` (at least ``ANSWER``)."""

    def __init__(self, store: Store, deadline: Deadline) -> None:
        self._store = store
        self._deadline = deadline
        self.gone: StoreGoneError | None = None

    def _call(self, call: Callable[[], _T], limit: float, *, lenient: bool = False) -> _T:
        if self.gone is not None:
            raise self.gone
        try:
            return bounded(call, limit)
        except StoreGoneError as exc:
            self.gone = exc
            raise
        except Exception as exc:
            if lenient:  # a wait's timeout: the caller asks check() what arrived
                raise
            self.gone = StoreGoneError(f"connection lost ({_first_line(exc)})", frozen=False)
            raise self.gone from None

    def _limit(self) -> float:
        return self._deadline.remaining(ANSWER)

    def set(self, key: str, value: str | bytes) -> None:
        self._call(lambda: self._store.set(key, value), self._limit())

    def get(self, key: str) -> bytes:
        return self._call(lambda: self._store.get(key), self._limit())

    def check(self, keys: list[str]) -> bool:
        return self._call(lambda: self._store.check(keys), self._limit())

    def check_each(self, keys: list[str]) -> list[bool]:
        """Which of ``keys`` are set, in one bounded call however many there are."""
        return self._call(lambda: [self._store.check([k]) for k in keys], self._limit())

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        limit = timeout.total_seconds() + ANSWER
        self._call(lambda: self._store.wait(keys, timeout), limit, lenient=True)

    def multi_get(self, keys: list[str]) -> list[bytes]:
        multi = getattr(self._store, "multi_get", None)
        if multi is None:
            return [self.get(k) for k in keys]
        return list(self._call(lambda: multi(keys), self._limit()))


def tcp_store(addr: str, port: int, world_size: int, *, is_master: bool, timeout: float) -> Store:
    """A TCPStore at ``addr:port`` (serving it when ``is_master``), made within ``timeout``
    plus :data:`ANSWER` whatever the server does; torch's C++ warnings are kept off stderr
    when envguard is the one importing torch (the gate says one line)."""
    if "torch" not in sys.modules and "TORCH_CPP_LOG_LEVEL" not in os.environ:
        # c10 reads it once, when its library loads; the launched command gets it unset.
        os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"
        try:
            import torch.distributed  # noqa: F401
        except ImportError:
            pass  # said below, in one line
        finally:
            del os.environ["TORCH_CPP_LOG_LEVEL"]
    try:
        import torch.distributed as dist
    except ImportError as exc:  # envguard in a venv of its own (pipx), not the job's
        raise UsageError(
            f"the gate meets the other ranks through torch.distributed, which this Python"
            f" ({sys.executable}) cannot import ({exc})",
            hint="run the gate with the job's own Python: python -m envguard gate ...",
        ) from None

    def make() -> Store:
        store: Store = dist.TCPStore(
            addr,
            port,
            world_size,
            is_master=is_master,
            timeout=timedelta(seconds=timeout),
            wait_for_workers=False,
        )
        return store

    try:
        return bounded(make, timeout + ANSWER)
    except StoreGoneError:
        raise
    except Exception as exc:  # torch's DistNetworkError and its kin
        raise StoreGoneError(_first_line(exc), frozen=False) from None
