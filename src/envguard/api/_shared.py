"""Helpers the api modules share: the Measure from the options, the snapshot a command
names, uv's sources with their wheelhouse."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from envguard.errors import UsageError
from envguard.snapshots import store
from envguard.snapshots.measure import VIA_TIMEOUT, Measure

TYPE_CHECKING = False  # typing is not loaded for a command's start

if TYPE_CHECKING:
    from envguard.probe.channel import Target
    from envguard.recovery.sources import Sources
    from envguard.snapshots.models import Snapshot


def settings(
    measure: Measure | None,
    *,
    python: str | Path | None = None,
    via: str | Sequence[str] | None = None,
    timeout: float | None = VIA_TIMEOUT,
    allow: Sequence[str | Path] = (),
    root: str | Path | None = None,
    deep: bool = False,
    pid: int | None = None,
) -> Measure:
    """``measure``, or one made from the keywords the API took before it (still accepted:
    scripts written against them keep working); both at once is a UsageError."""
    flat = Measure(
        python=python,
        via=via if via is None or isinstance(via, str) else tuple(via),
        timeout=timeout,
        allow=tuple(str(a) for a in allow),
        root=root,
        deep=deep,
        pid=pid,
    )
    if measure is None:
        return flat
    if flat != Measure():  # a keyword given besides (each default is Measure's)
        raise UsageError("give measure= or the keywords it holds (python=, via=, ...), not both")
    return measure


def snapshot_path(good: str | Path | None) -> Path:
    """The file of the snapshot ``good`` names (default: the newest in snapshots/)."""

    return store.resolve(str(good)) if good is not None else store.newest()


def load_snapshot(ref: str | Path | Snapshot) -> Snapshot:
    """``ref`` itself when it is a Snapshot, else the snapshot it names, validated in full."""
    from envguard.snapshots.models import Snapshot

    return ref if isinstance(ref, Snapshot) else store.load(ref)


def target_for(measure: Measure) -> Target:
    """Where a command acts: this host, or the far side of ``measure``'s via."""
    # Only restore and keep talk to a target: off the start-up path of snapshot and diff.
    from envguard.probe.channel import RemoteTarget, Target

    prefix = measure.prefix()
    if not prefix:
        return Target()
    python = None if measure.python is None else str(measure.python)
    return RemoteTarget(prefix, python or "python3", timeout=measure.timeout)


def with_wheelhouse(sources: Sources) -> Sources:
    """``sources`` with the wheel file names of its local --find-links folders."""
    from dataclasses import replace

    names: list[str] = []
    for link in sources.find_links:
        folder = Path(link[7:] if link.startswith("file://") else link).expanduser()
        if "://" in link and not link.startswith("file://"):
            continue  # a remote page: uv reads it, envguard does not
        try:
            with os.scandir(folder) as scan:
                names += [e.name for e in scan if e.name.endswith(".whl")]
        except OSError:
            continue
    return replace(sources, wheelhouse=tuple(sorted(names)))
