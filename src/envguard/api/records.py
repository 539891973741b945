"""What snapshots keep and what their runs record: keep() puts a snapshot's files and
compile caches in the content store, log() reads the history of snapshots/."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from envguard.api._shared import settings, target_for
from envguard.snapshots import store as snapshots
from envguard.snapshots.blobs import Blobs
from envguard.snapshots.history import history
from envguard.snapshots.keep import keep_caches, keep_files
from envguard.snapshots.measure import Measure

if TYPE_CHECKING:
    from envguard.snapshots.history import Entry
    from envguard.snapshots.models import Snapshot


def keep(
    snap: Snapshot,
    *,
    store: str | Path,
    files: bool = False,
    caches: bool = False,
    via: str | Sequence[str] | None = None,
    python: str | None = None,
    timeout: float | None = 120.0,
    measure: Measure | None = None,
) -> Snapshot:
    """``snap`` with its tracked files' contents (``files``) and its compile caches
    (``caches``, as gzip tarballs) kept in the content store ``store``; read where ``snap``
    was taken: pass the same ``via`` or ``measure`` (a prefix stored in a snapshot is
    never run)."""
    blobs = Blobs(store)
    target = target_for(settings(measure, via=via, python=python, timeout=timeout))
    warnings: list[str] = []
    if files:
        snap, warnings = keep_files(snap, blobs, target)
    if caches:
        snap = keep_caches(snap, blobs, target)
    if warnings:
        snap = snap.model_copy(update={"warnings": (*snap.warnings, *warnings)})
    return snap


def log(*, root: Path | None = None) -> list[Entry]:
    """The snapshots in snapshots/, oldest first, with their metrics and what changed since
    the one before (unreadable files last, with why)."""
    return history(snapshots.list_snapshots(root=root))
