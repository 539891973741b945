"""The installed-files check run beside the probe (installed.py is what it checks): shared
between two forked children when a core is free, else in a thread the probe waits on, by a
deadline either way."""

# ruff: noqa: UP006, UP035, UP045, B905
# (B905: zip(strict=) is 3.10+; the target runs 3.8)
from __future__ import annotations

import os
import struct
import time

from .forked import Forked, spare_core, spread
from .installed import MAX_CLASHES, finish, prepare, read_beside, work
from .loaded import QUICK_COMPILE_SECONDS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

    from .distcache import DistCache
    from .installed import Plan

# Seconds the check may take beside the probe (a slow or network file system): then a note.
CHECK_SECONDS = 60.0
# The mode that reads the RECORDs and settles who claims what, and checks no file: guard's
# would-be venv (an incoming wheel writing over a file a kept distribution claims).
CLAIMS = "claims"
# Units a shared queue holds: 4 bytes each, all written before the fork into one pipe,
# whose buffer (64 KiB on Linux) must take them without blocking.
MAX_QUEUED = 8192


class Checking:
    """check_installed() beside the probe. With a core to spare (see forked.spare_core), the
    check is prepared here (every RECORD read), then its units (one distribution each, with
    the bytecode of its folders) are taken from one queue by two forked children, both
    started at once, while the probe does its own work: both cores work on it, neither
    share waits for the other while units are left, and the probe's waits (git, the
    libraries) are filled. A child that dies has its units checked here, in a thread, in
    the time left. Else (a busy machine, no fork) it
    runs in a thread started when the result is asked for, while the probe's own thread
    only waits (a thread beside the probe's Python work would wait for the GIL after every
    lstat). Either way, ``timeout`` seconds at most: then a note, and the check's answer
    is not waited for. ``mode`` "off": nothing is checked."""

    def __init__(
        self,
        packages: List[Dict[str, Any]],
        mode: str,
        cache: Optional[DistCache] = None,
        timeout: float = CHECK_SECONDS,
        fork: Optional[bool] = None,
        started: bool = True,
        overlay: Optional[str] = None,
    ) -> None:
        """``started`` False: the check is prepared (every RECORD read) but its shares are
        forked by start() (main.begin prepares it before the probe's argument comes).
        ``overlay``: guard's would-be venv's incoming site (installed.prepare)."""
        self.packages = packages
        self.mode = mode
        self.overlay = overlay
        self.cache = cache
        self.timeout = timeout
        self.fork = fork
        self.deadline = time.monotonic() + timeout
        self.child: Optional[Forked] = None
        self.second: Optional[Forked] = None  # the other share
        self.plan: Optional[Plan] = None
        self.queue = -1
        self.warnings: List[str] = []
        self.mark: Optional[List[int]] = None
        # What the run had used of the cache before this check (cancel() goes back to it).
        self.before = (cache.mark(), cache.files_checked) if cache is not None else None
        for dist in packages:  # set here: the probe reads these dicts meanwhile
            dist["on_disk"] = None
        if mode == CLAIMS:  # the RECORDs read and their clashes settled; no file looked at
            self.plan = prepare(
                [dict(dist) for dist in packages], "quick", self.warnings, cache, overlay=overlay
            )
            return
        forks = self._forks() if started else None
        if mode not in ("quick", "deep") or forks is False:
            return
        self.plan = prepare(
            [dict(dist) for dist in packages], mode, self.warnings, cache, overlay=overlay
        )
        # what the probe used of the cache so far (a share answers what it used after it)
        self.mark = cache.mark() if cache is not None else None
        if started:
            self.start(forks)

    def _forks(self) -> bool:
        return spare_core() if self.fork is None else self.fork

    def start(self, forks: Optional[bool] = None) -> None:
        """Fork the shares of the prepared check, when a core is spare (``forks``: as
        already told; else result() runs the prepared plan in a thread). The check's
        deadlines count from here: a plan prepared before the probe's argument came
        (main.begin) has not spent its compiling time waiting for it."""
        plan = self.plan
        if plan is None or self.child is not None or self.mode == CLAIMS:
            return
        self.deadline = time.monotonic() + self.timeout
        if not plan.deep:
            plan.deadline[0] = time.monotonic() + QUICK_COMPILE_SECONDS
        if not (self._forks() if forks is None else forks):
            return
        if not 1 < len(plan.units) <= MAX_QUEUED:
            return  # one unit: nothing to share; too many for the queue: a thread, this plan
        read_fd, write_fd = os.pipe()
        queued = struct.pack("<%dI" % len(plan.units), *range(len(plan.units)))
        try:
            os.set_blocking(write_fd, False)  # a smaller pipe (16 KiB on macOS): no fork
            whole = os.write(write_fd, queued) == len(queued)
        except OSError:
            whole = False
        finally:
            os.close(write_fd)  # the queue ends where its units do
        if not whole:
            os.close(read_fd)
            return
        self.queue = read_fd
        plan.shares = 2  # each share may hash half of what is left to hash (installed.work)
        child = Forked(lambda: self._share(plan, read_fd), self._left())
        if child.started:
            self.child = child
            # The second share at once too: the probe's own work (libraries, git, the
            # caches' folders) waits on files and processes, and a share beside it fills
            # those waits (a thread of this process cannot: see installed.work's inside).
            self.second = Forked(lambda: self._share(plan, read_fd), self._left())
        else:
            os.close(read_fd)
            self.queue = -1
            plan.shares = 1  # no fork: the whole check in one share (_work)

    def cancel(self) -> None:
        """Stop the check: its children killed and collected, its queue closed; nothing of
        theirs reaches the distribution cache. result() then says nothing was checked."""
        for forked in (self.child, self.second):
            if forked is not None and forked.started:
                forked.stop()
        self.child = self.second = None
        if self.queue >= 0:
            os.close(self.queue)
            self.queue = -1
        self.plan = None
        self.mode = "off"
        if self.cache is not None and self.before is not None:
            self.cache.rewind(*self.before)

    def _share(self, plan: Plan, queue: int) -> Dict[str, Any]:
        """One share of the check, as plain JSON: the units taken from ``queue``, and what
        the cache learned from them."""
        answer = work(plan, _taken(queue), inside=True)
        answer["cache"] = self.cache.checked(self.mark) if self.cache is not None else None
        return answer

    def result(self, warnings: List[str]) -> Dict[str, Any]:
        """{"clashes", "unowned"} once the check ended; its warnings added to ``warnings``."""
        if self.mode == CLAIMS and self.plan is not None:
            warnings.extend(self.warnings)
            return {"clashes": self.plan.clashes[:MAX_CLASHES], "unowned": None}
        if self.mode not in ("quick", "deep"):
            return {"clashes": None, "unowned": None}
        if self.child is not None and self.plan is not None:
            answer, failed = self._shared(self.plan, self.child)
        else:
            answer, failed = self._in_thread()
        if answer is None:
            if failed is not None and failed.startswith("took over "):
                failed = "took over %gs" % self.timeout  # not what was left of it
            why = "" if str(failed).startswith(_NO_THREAD) else " (a slow or network file system?)"
            warnings.append(
                "installed files were not checked against RECORD: the check %s%s" % (failed, why)
            )
            return {"clashes": None, "unowned": None}
        for dist, on_disk in zip(self.packages, answer["on_disk"]):
            dist["on_disk"] = on_disk
        if self.cache is not None and answer["cache"] is not None:
            self.cache.take_checked(answer["cache"])
        warnings.extend(answer["warnings"])
        found: Dict[str, Any] = answer["found"]
        return found

    def _shared(self, plan: Plan, child: Forked) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
        """Both shares' answers put together (where the second child did not start, the
        units the first left are taken here, in a thread); None with the reason when a
        share overran, or failed and its units could not be checked again in time."""
        queue, self.queue = self.queue, -1
        second = self.second
        answers: List[Dict[str, Any]] = []
        children = [child]
        if second is not None and second.started:
            children.append(second)
        else:
            own, failed = _bounded(lambda: work(plan, _taken(queue)), self._left())
            if own is None:
                # The queue stays open: the share left running reads it when its call
                # returns, and a number closed here would be reused by the next open().
                child.result(0.0)  # killed: the check as a whole gave no answer
                if self.cache is not None:
                    self.cache.abandon()
                return None, failed
            answers.append(own)
        os.close(queue)
        spread([forked.pid for forked in children])  # this process waits for them now
        # What finish() reads that no share changes, read while they work, by the check's
        # deadline (in a thread: a file system that hangs now gives the check's note).
        failed = _beside(plan, self._left())
        if failed is not None:
            for forked in children:
                forked.stop()
            if self.cache is not None:
                self.cache.abandon()
            return None, failed
        for forked in children:
            theirs = forked.result(self._left())
            if theirs is None:
                failed = forked.failed
            else:
                if self.cache is not None and theirs.get("cache") is not None:
                    self.cache.take_checked(theirs["cache"])
                answers.append(theirs)
        if failed is not None:
            # A child died (the OOM killer's pick: it is a copy of the probe) or failed,
            # and the units it took went with it: they are checked here while time is left.
            done = {index for answer in answers for index, _ in answer["on_disk"]}
            rest = [n for n, unit in enumerate(plan.units) if unit[1] not in done]
            again = None
            if self._left():
                again = _bounded(lambda: work(plan, rest), self._left())[0]
                if again is None and self.cache is not None:
                    self.cache.abandon()  # a share left running still fills it
            if again is None:
                return None, failed
            answers.append(again)
        copies = [dict(dist) for dist in self.packages]
        found = finish(plan, copies, answers, self.warnings)
        return {
            "on_disk": [dist["on_disk"] for dist in copies],
            "found": found,
            "warnings": self.warnings,
            "cache": None,
        }, None

    def _left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def _work(self, packages: List[Dict[str, Any]]) -> Dict[str, Any]:
        """The whole check of ``packages`` in one share, as plain JSON (from the plan when
        one was prepared for a share that did not start: its RECORDs are not read again)."""
        warnings = list(self.warnings)
        plan = self.plan
        if plan is None:
            plan = prepare(packages, self.mode, warnings, self.cache, overlay=self.overlay)
        elif not plan.deep:  # compiling starts now, not when the plan was made
            plan.deadline[0] = time.monotonic() + QUICK_COMPILE_SECONDS
        found = finish(plan, packages, [work(plan, range(len(plan.units)))], warnings)
        return {
            "on_disk": [dist["on_disk"] for dist in packages],
            "found": found,
            "warnings": warnings,
            "cache": self.cache.checked() if self.cache is not None else None,
        }

    def _in_thread(self) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
        """The check in a daemon thread, on copies of the records, waited for ``timeout``
        seconds: one stuck in a system call is left behind, and the distribution cache it
        still fills is not written (see DistCache.abandon)."""
        copies = [dict(dist) for dist in self.packages]
        answer, failed = _bounded(lambda: self._work(copies), self.timeout)
        if answer is None and self.cache is not None:
            self.cache.abandon()
        return answer, failed


def _beside(plan: Plan, timeout: float) -> Optional[str]:
    """read_beside(plan) in a thread, waited for ``timeout`` seconds (_bounded): None once
    done, else why not."""

    def read() -> Dict[str, Any]:
        read_beside(plan)
        return {}

    return _bounded(read, timeout)[1]


_NO_THREAD = "could not start a thread"


def _no_thread(exc: Exception) -> str:
    """Why the check gave no answer when it could not start a thread (the note's words)."""
    return "%s (%s)" % (_NO_THREAD, exc)


def _taken(queue: int) -> Iterator[int]:
    """The units read one at a time from the shared queue (a read of 4 bytes from a pipe
    is whole: no other reader gets part of it) until it is empty."""
    while True:
        data = os.read(queue, 4)
        if len(data) < 4:
            return
        yield struct.unpack("<I", data)[0]


def _bounded(
    run: Callable[[], Dict[str, Any]], timeout: float
) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """``run()`` in a thread of its own, waited for ``timeout`` seconds: its value, or None
    with why (it took longer, or failed). The thread is _thread's: threading costs a probe
    2 ms to import (functools and types with it), and nothing else in a plain probe needs
    it; one stuck in a system call is left behind, as a daemon thread would be."""
    import _thread

    ended = _thread.allocate_lock()
    ended.acquire()
    done: List[Any] = []

    def target() -> None:
        try:
            done.append(run())
        except BaseException as exc:  # (said as the check's failure, not as a traceback)
            done.append("%s: %s" % (type(exc).__name__, exc))
        finally:
            ended.release()

    if not timeout > 0:  # (no time left, or none given: nothing started)
        return None, "took over %gs" % timeout
    try:
        _thread.start_new_thread(target, ())
    except RuntimeError as exc:  # no thread to be had (a process limit): the check's note
        return None, _no_thread(exc)
    if not ended.acquire(True, min(timeout, _thread.TIMEOUT_MAX)) or not done:
        return None, "took over %gs" % timeout
    if isinstance(done[0], str):
        return None, done[0]
    answer: Dict[str, Any] = done[0]
    return answer, None
