"""Compile caches (torch inductor, triton, --cache): cold, shrunk, unreadable, and
whether they will be used (will miss, stale, on a network file system)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from envguard.compare.forecast import KINDS, forecast, networked, stale
from envguard.compare.sections.base import Section
from envguard.compare.severity import Severity
from envguard.snapshots.request import USER_CACHE
from envguard.units import human_size

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.compare.models import Change
    from envguard.snapshots.models import Cache, Snapshot

W, I = Severity.warning, Severity.info  # noqa: E741
# Default caches are keyed by kind in a fleet (their paths name the user); --cache by path.
DEFAULT_KINDS = ("inductor", "triton")


def _cache(b: Collector, ec: Cache, ac: Cache | None) -> None:
    label = f"{ec.kind} cache {ec.path}"
    was = f"{human_size(ec.bytes)}, {ec.files} files"
    if ac is not None and ac.error:  # not walked: say why, not that it went cold
        b.add(
            "unreadable",
            ec.path,
            expected=was,
            actual="not read",
            severity=W,
            message=f"{label} {ac.error}",
        )
        return
    if ac is None or not ac.exists or (ac.files == 0 and ec.files > 0):
        if ec.bytes > 0 or ec.files > 0:
            state = "missing" if ac is None or not ac.exists else "empty"
            b.add(
                "cold",
                ec.path,
                expected=was,
                actual=state,
                severity=W,
                message=f"{label} is cold ({state}; was {was}): first steps will recompile,"
                " expect a slow warm-up",
            )
        return
    if not ac.readable and ec.readable:
        b.add(
            "unreadable",
            ec.path,
            expected="readable",
            actual="unreadable",
            severity=W,
            message=f"{label} is no longer readable",
        )
    elif ac.bytes * 2 < ec.bytes:
        b.add(
            "shrunk",
            ec.path,
            expected=was,
            actual=f"{human_size(ac.bytes)}, {ac.files} files",
            severity=W,
            message=f"{label} lost more than half its size ({was} -> {human_size(ac.bytes)}):"
            " expect recompilation",
        )
    elif ac.bytes > ec.bytes:
        b.add(
            "grown",
            ec.path,
            expected=human_size(ec.bytes),
            actual=human_size(ac.bytes),
            severity=I,
            message=f"{label} grew {human_size(ec.bytes)} -> {human_size(ac.bytes)}",
        )


def one_per_folder(caches: Iterable[Cache]) -> list[Cache]:
    """Each folder once, in the recorded order: a file from an older envguard may hold a
    folder twice (`--cache DIR` naming $TORCHINDUCTOR_CACHE_DIR). The richer record is
    kept: the one with a kept archive, then the one with a named kind (inductor, triton)."""
    listed = list(caches)
    chosen: dict[str, Cache] = {}
    for cache in listed:
        key = posixpath.normpath(cache.path)
        held = chosen.get(key)
        if held is None or _richness(cache) > _richness(held):
            chosen[key] = cache
    return [c for c in listed if chosen[posixpath.normpath(c.path)] is c]


def _richness(cache: Cache) -> tuple[bool, bool]:
    return cache.archive is not None, cache.kind != USER_CACHE


# What each verdict says of the cache, after its name.
_SAID = {"miss": "will miss", "rebuild": "will hit, then rebuild", "may-miss": "may miss"}


def _forecast(b: Collector, ec: Cache, ac: Cache | None, e: Snapshot, a: Snapshot) -> None:
    """Whether the compile cache will be used (compare/forecast.py): the ingredients of
    its key that changed, entries built for another torch, a folder on a network fs."""
    label = f"{ec.kind} cache {ec.path}"
    if ec.files and (ec.kind in DEFAULT_KINDS or ec.builds):
        for r in forecast("triton" if ec.kind == "triton" else "inductor", e, a):
            b.add(
                KINDS[r.verdict],
                f"{ec.path}: {r.ingredient}",
                expected=r.expected,
                actual=r.actual,
                severity=I if r.verdict == "may-miss" else W,
                message=f"{label} {_SAID[r.verdict]}: {r.why}",
            )
    if ac is None or not ac.exists:
        return
    why = stale(ac, a) if ac.files else None
    if why:
        b.add(
            "stale",
            ac.path,
            expected="entries for this torch",
            actual="stale",
            # Already so in the good snapshot: said, not drift.
            severity=I if stale(ec, e) else W,
            message=f"{label} is stale: {why}; every graph will miss",
        )
    if networked(ac.fs):
        b.add(
            "network-fs",
            ac.path,
            expected=ec.fs,
            actual=ac.fs,
            severity=I if networked(ec.fs) else W,
            message=f"{label} is on {ac.fs}, a network file system: a cache shared between"
            " nodes there is a known source of races (its writers rename and lock files,"
            " which are not atomic across nodes)",
        )


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    actual = {(c.kind, c.path): c for c in a.caches}
    for ec in one_per_folder(e.caches):
        ac = actual.get((ec.kind, ec.path))
        _cache(b, ec, ac)
        _forecast(b, ec, ac, e, a)


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    for c in snap.caches:
        key = f"cache {c.kind}" if c.kind in DEFAULT_KINDS else f"cache {c.path}"
        yield key, "warm" if c.exists and c.files else "cold"


def restore_hint(change: Change, snapshot: Snapshot) -> str | None:
    if change.kind in ("cold", "shrunk"):
        return f"{change.message}; warm it with your own warm-up run (or --then CMD)"
    return change.message


SECTION = Section(
    name="caches",
    title="compile caches",
    compare=compare,
    identity=identity,
    restore_hint=restore_hint,
)
