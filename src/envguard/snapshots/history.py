"""`envguard log`: the snapshots in time order, each with its metrics and what changed since
the one before, so "when did throughput fall, and what changed then" is one command.

A thousand snapshots are read as plain JSON, each field checked for its type, never built
into models: a log of a year of runs takes well under a second. Files that do not read are
listed with why, as `list` does."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from envguard.errors import EnvguardError
from envguard.reading import UNSAFE_CHARS, json_loads
from envguard.snapshots import shape
from envguard.version import SCHEMA_VERSION

if TYPE_CHECKING:  # the models (pydantic) are never loaded for a log
    from envguard.snapshots.models import MetricValue


@dataclass(frozen=True)
class Entry:
    """One snapshot of the log and its change from the previous readable one."""

    path: Path
    name: str = ""
    created: datetime | None = None
    torch: str | None = None
    packages: int = 0
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    change: str = ""
    error: str | None = None


def history(paths: list[Path]) -> list[Entry]:
    """Entries oldest first (by `created`), unreadable files last."""
    read = [_read(p) for p in paths]
    good = sorted((e for e in read if e[0].error is None), key=_when)
    out: list[Entry] = []
    previous: dict[str, str] | None = None
    previous_torch: str | None = None
    for entry, versions in good:
        change = (
            "first snapshot"
            if previous is None
            else _change(previous, versions, previous_torch, entry.torch)
        )
        out.append(_with(entry, change=change))
        previous, previous_torch = versions, entry.torch
    out += [e for e, _ in read if e.error is not None]
    return out


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _when(read: tuple[Entry, dict[str, str]]) -> tuple[datetime, int, str]:
    """Time order: `created`; then, for two taken in the same second (older snapshots
    keep whole seconds), the file's own time, then the name."""
    entry = read[0]
    try:
        written = entry.path.stat().st_mtime_ns
    except OSError:
        written = 0
    return entry.created or _EPOCH, written, entry.name


def _with(entry: Entry, **changes: object) -> Entry:
    from dataclasses import replace

    return replace(entry, **changes)  # type: ignore[arg-type]


def _read(path: Path) -> tuple[Entry, dict[str, str]]:
    from envguard.snapshots.store import read

    try:
        raw = json_loads(read(path))
        if not isinstance(raw, dict):
            raise ValueError("not an object")
        unknown = set(raw) - shape.SNAPSHOT_KEYS
        minor = raw.get("schema_minor", 0)
        if unknown and not (type(minor) is int and minor > shape.SCHEMA_MINOR):
            raise ValueError("unknown fields")  # a newer minor's are read past
        version = raw.get("schema_version", 1)
        if type(version) is not int or not 1 <= version <= SCHEMA_VERSION:
            raise ValueError("a schema_version envguard does not read")
        name, created = raw.get("name"), raw.get("created")
        if not isinstance(name, str) or not isinstance(created, str) or _unsafe(name):
            raise ValueError("no name or created time")
        when = datetime.fromisoformat(created.replace("Z", "+00:00"))
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        versions = _versions(raw.get("packages"))
        torch = raw.get("torch")
        build = torch.get("version") if isinstance(torch, dict) else None
        if build is not None and (not isinstance(build, str) or _unsafe(build)):
            raise ValueError("torch's version is not one short line")
        if any(_unsafe(n) or _unsafe(v) for n, v in versions.items()):
            raise ValueError("a package name or version is not one short line")
        metrics = raw.get("metrics") or {}
        if not isinstance(metrics, dict) or not all(_metric(v) for v in metrics.values()):
            raise ValueError("metrics are not numbers or text")
        if any(not isinstance(k, str) or _unsafe(k) for k in metrics):
            raise ValueError("a metric name is not one line")
    except (EnvguardError, ValueError, TypeError, RecursionError) as exc:
        reason = exc.message if isinstance(exc, EnvguardError) else "not an envguard snapshot"
        return Entry(path=path, error=reason), {}
    label = versions.get("torch")
    if isinstance(build, str) and label and "+" not in label and build.startswith(label + "+"):
        label = build  # PyPI's CUDA wheels: the build is in torch's version.py
    entry = Entry(
        path=path,
        name=name,
        created=when,
        torch=label,
        packages=len(versions),
        metrics=dict(metrics),
    )
    return entry, versions


def _unsafe(text: str) -> bool:
    import re

    return bool(re.search("[" + UNSAFE_CHARS + "]", text)) or len(text) > 256


def _metric(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return (
        value is None
        or isinstance(value, (int, bool))
        or (isinstance(value, str) and not _unsafe(value))
    )


def _versions(packages: object) -> dict[str, str]:
    if not isinstance(packages, list):
        raise ValueError("packages is not a list")
    found: dict[str, str] = {}
    for pkg in packages:
        if not isinstance(pkg, dict) or pkg.get("shadowed") is True:
            continue
        name, version = pkg.get("name"), pkg.get("version")
        if isinstance(name, str) and isinstance(version, str):
            found[name] = version
    return found


def _change(
    before: dict[str, str], after: dict[str, str], torch_before: str | None, torch_after: str | None
) -> str:
    """`torch 2.13.0+cpu -> 2.14.1+cu130; 155 added, 3 changed, 1 removed` or `no change`."""
    added = len(after.keys() - before.keys())
    removed = len(before.keys() - after.keys())
    changed = sum(1 for n in before.keys() & after.keys() if before[n] != after[n])
    parts = []
    if torch_before != torch_after:
        parts.append(f"torch {torch_before or 'absent'} -> {torch_after or 'absent'}")
    counts = [
        f"{n} {w}" for n, w in ((added, "added"), (changed, "changed"), (removed, "removed")) if n
    ]
    if counts:
        parts.append(", ".join(counts))
    return "; ".join(parts) or "no package change"


def sparkline(values: list[float | None]) -> list[str]:
    """One bar per value (▁ to █), scaled from the lowest to the highest; blank for none.
    Values too far apart to subtract (1e308 and -1e308) are drawn by rank instead."""
    bars = "▁▂▃▄▅▆▇█"
    known = sorted({v for v in values if v is not None})
    if not known:
        return [" " for _ in values]
    low, high = known[0], known[-1]
    span = high - low
    top = len(bars) - 1
    if not math.isfinite(span):
        rank = {v: i / max(1, len(known) - 1) for i, v in enumerate(known)}
        return [" " if v is None else bars[round(rank[v] * top)] for v in values]
    span = span or 1.0
    return [" " if v is None else bars[min(top, int((v - low) / span * top + 0.5))] for v in values]


def metric_value(entry: Entry, name: str) -> float | None:
    value = entry.metrics.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # a 4,000-digit integer: not a measurement to draw
        return None
    return number if math.isfinite(number) else None
