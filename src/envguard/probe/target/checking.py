"""The installed-files check run beside the probe (installed.check_installed is what it
checks): in a forked child when a core is free, else in a thread the probe waits on, by a
deadline either way."""

# ruff: noqa: UP006, UP035, UP045, B905
# (B905: zip(strict=) is 3.10+; the target runs 3.8)
from __future__ import annotations

from .forked import Forked, spare_core
from .installed import check_installed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

    from .distcache import DistCache

# Seconds the check may take beside the probe (a slow or network file system): then a note.
CHECK_SECONDS = 60.0


class Checking:
    """check_installed() beside the probe. With a core to spare (see forked.spare_core), in
    a forked child started once the distributions are read, while the probe reads the rest;
    else (a busy machine, no fork) in a thread started when the result is asked for, while
    the probe's own thread only waits (a thread beside the probe's Python work would wait
    for the GIL after every lstat). Either way, ``timeout`` seconds at most: then a note,
    and the check's answer is not waited for. ``mode`` "off": nothing is checked."""

    def __init__(
        self,
        packages: List[Dict[str, Any]],
        mode: str,
        cache: Optional[DistCache] = None,
        timeout: float = CHECK_SECONDS,
        fork: Optional[bool] = None,
    ) -> None:
        self.packages = packages
        self.mode = mode
        self.cache = cache
        self.timeout = timeout
        self.child: Optional[Forked] = None
        for dist in packages:  # set here: the probe reads these dicts meanwhile
            dist["on_disk"] = None
        if mode in ("quick", "deep") and (spare_core() if fork is None else fork):
            self.child = Forked(lambda: self._work(packages))

    def _work(self, packages: List[Dict[str, Any]]) -> Dict[str, Any]:
        """The check of ``packages``, as plain JSON."""
        warnings: List[str] = []
        found = check_installed(packages, self.mode, warnings, self.cache)
        return {
            "on_disk": [dist["on_disk"] for dist in packages],
            "found": found,
            "warnings": warnings,
            "cache": self.cache.checked() if self.cache is not None else None,
        }

    def result(self, warnings: List[str]) -> Dict[str, Any]:
        """{"clashes", "unowned"} once the check ended; its warnings added to ``warnings``."""
        if self.mode not in ("quick", "deep"):
            return {"clashes": None, "unowned": None}
        if self.child is not None and self.child.started:
            answer = self.child.result(self.timeout)
            failed = self.child.failed
        else:
            answer, failed = self._in_thread()
        if answer is None:
            warnings.append(
                "installed files were not checked against RECORD: the check %s (a slow or "
                "network file system?)" % failed
            )
            return {"clashes": None, "unowned": None}
        for dist, on_disk in zip(self.packages, answer["on_disk"]):
            dist["on_disk"] = on_disk
        if self.cache is not None and answer["cache"] is not None:
            self.cache.take_checked(answer["cache"])
        warnings.extend(answer["warnings"])
        found: Dict[str, Any] = answer["found"]
        return found

    def _in_thread(self) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
        """The check in a daemon thread, on copies of the records, waited for ``timeout``
        seconds: one stuck in a system call is left behind, and the distribution cache it
        still fills is not written (see DistCache.abandon)."""
        import threading

        done: List[Any] = []
        copies = [dict(dist) for dist in self.packages]

        def run() -> None:
            try:
                done.append(self._work(copies))
            except Exception as exc:
                done.append("%s: %s" % (type(exc).__name__, exc))

        thread = threading.Thread(target=run, name="envguard-installed", daemon=True)
        thread.start()
        thread.join(self.timeout)
        if not done:
            if self.cache is not None:
                self.cache.abandon()
            return None, "took over %gs" % self.timeout
        if isinstance(done[0], str):
            return None, done[0]
        answer: Dict[str, Any] = done[0]
        return answer, None
