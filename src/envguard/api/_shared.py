"""Helpers the api modules share: a capture request from the options, --root, the snapshot
a command names, uv's sources with their wheelhouse."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from envguard.errors import UsageError
from envguard.probe.interpreters import resolve_python
from envguard.snapshots import store
from envguard.snapshots.request import USER_CACHE, CaptureRequest
from envguard.tools import split_command

if TYPE_CHECKING:
    from envguard.probe.channel import Target
    from envguard.recovery.sources import Sources
    from envguard.snapshots.models import MetricValue, Snapshot


def capture_request(
    *,
    python: str | Path | None,
    name: str | None,
    repos: Sequence[str | Path],
    files: Sequence[str],
    caches: Sequence[str],
    metrics: Mapping[str, MetricValue] | None,
    note: str | None,
    via: str | Sequence[str] | None,
    timeout: float | None,
    command: Sequence[str] | None,
) -> CaptureRequest:
    """The request snapshot() and its kin send to the probe, checked before it starts."""
    from datetime import datetime, timezone

    snap_name = (
        store.validate_name(name) if name else datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    )
    prefix = (
        split_command(via, option="--via") if isinstance(via, str) else tuple(via) if via else ()
    )
    if prefix:
        target: Path | str = str(python) if python else "python3"
    else:
        target = resolve_python(str(python) if python else None)
    if timeout is not None:
        via_timeout(timeout)  # zero, negative or NaN seconds: bad usage here or through --via
    return CaptureRequest(
        python=target,
        python_label=f"--python {python}" if python and not prefix else None,
        name=snap_name,
        repos=tuple(Path(r) for r in repos),
        files=tuple(files),
        caches=tuple((USER_CACHE, c) for c in caches),
        include_cwd_repo=not prefix,
        metrics=dict(metrics or {}),
        note=note,
        command=tuple(command) if command is not None else ("python", *sys.argv),
        via=prefix,
        timeout=timeout if prefix else None,
    )


def via_timeout(timeout: float) -> float:
    """``timeout`` when it is a number of seconds a far side can be given (--timeout)."""
    import math

    if not (timeout > 0 and math.isfinite(timeout)):  # also NaN
        raise UsageError(f"--timeout {timeout:g}: seconds, more than 0")
    return timeout


def root_path(root: str | Path, *, remote: bool) -> str:
    """--root as an absolute path (on the far side: as given, which must be absolute)."""

    text = os.path.expanduser(str(root))
    if remote:
        if not os.path.isabs(text):
            raise UsageError(f"--root {root}: with --via it must be an absolute path")
        return text
    if not os.path.isdir(text):
        raise UsageError(f"--root {root}: no such directory")
    return os.path.abspath(text)


def snapshot_path(good: str | Path | None) -> Path:
    """The file of the snapshot ``good`` names (default: the newest in snapshots/)."""

    return store.resolve(str(good)) if good is not None else store.newest()


def load_snapshot(ref: str | Path | Snapshot) -> Snapshot:
    """``ref`` itself when it is a Snapshot, else the snapshot it names, validated in full."""
    from envguard.snapshots.models import Snapshot

    return ref if isinstance(ref, Snapshot) else store.load(ref)


def target_for(
    via: str | Sequence[str] | None, *, python: str | None, timeout: float | None
) -> Target:
    """Where a command acts: this host, or the far side of the ``via`` prefix."""
    # Only restore and keep talk to a target: off the start-up path of snapshot and diff.
    from envguard.probe.channel import RemoteTarget, Target

    if not via:
        return Target()
    prefix = split_command(via, option="--via") if isinstance(via, str) else tuple(via)
    return RemoteTarget(prefix, python or "python3", timeout=timeout)


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
