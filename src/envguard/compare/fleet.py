"""Pure N-way comparison: group hosts by environment and find the odd ones out."""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from contextlib import suppress
from pathlib import Path

from envguard.compare.models import FleetGroup, FleetItem, FleetReport, FleetValue
from envguard.compare.sections import REGISTRY
from envguard.compare.sections.interpreter import ABSENT
from envguard.redact import redact_text
from envguard.snapshots.models import Snapshot


def items(snap: Snapshot) -> dict[str, str]:
    """What must be equal on every node, as item -> value: each section's identity."""
    # Shown in every fleet format: redacted as drift text is (a name or version may hold a token).
    return {
        redact_text(item): redact_text(value)
        for section in REGISTRY
        for item, value in section.identity(snap)
    }


def fingerprint(values: dict[str, str]) -> str:
    """A stable hash of a host's items: equal environments, equal fingerprints."""
    # JSON, not a hand-made separator: no value can imitate another item.
    text = json.dumps(sorted(values.items()), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def compare(snapshots: dict[str, Snapshot], *, baseline: Snapshot | None = None) -> FleetReport:
    """Group hosts and list every item whose value is not the same everywhere."""
    return compare_items(
        {host: items(snap) for host, snap in snapshots.items()},
        baseline=items(baseline) if baseline is not None else None,
        baseline_name=baseline.name if baseline is not None else None,
    )


def compare_items(
    per_host: dict[str, dict[str, str]],
    *,
    baseline: dict[str, str] | None = None,
    baseline_name: str | None = None,
    fingerprints: dict[str, str] | None = None,
) -> FleetReport:
    """compare() over already-extracted items (a large fleet never holds all snapshots).

    Hosts with one fingerprint hold the same items, so each item is read once per distinct
    environment, not once per host: 1,000 nodes in a handful of groups cost a handful.
    """
    hosts = tuple(sorted(per_host))
    groups: dict[str, list[str]] = defaultdict(list)
    for host in hosts:
        fp = fingerprints[host] if fingerprints else fingerprint(per_host[host])
        groups[fp].append(host)
    sample = {fp: per_host[members[0]] for fp, members in groups.items()}
    base = baseline
    keys = set().union(*sample.values()) if sample else set()
    if base is not None:
        keys |= set(base)
    differences = []
    odd: set[str] = set()
    for key in sorted(keys):
        by_value: dict[str, list[str]] = defaultdict(list)
        for fp, members in groups.items():
            by_value[sample[fp].get(key, ABSENT)].extend(members)
        expected = base.get(key, ABSENT) if base is not None else None
        if len(by_value) == 1 and (expected is None or expected in by_value):
            continue
        counts = Counter({value: len(members) for value, members in by_value.items()})
        top = max(counts.values())
        majority = [v for v, n in counts.items() if n == top]
        values = []
        for value, members in sorted(by_value.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            members.sort()
            if expected is not None:
                is_odd = value != expected
            else:  # a tie has no majority: every side is suspect
                is_odd = value not in majority or len(majority) > 1
            if is_odd:
                odd.update(members)
            # Built without re-validation: every value is a str from a validated snapshot, and
            # a 100,000-package fleet makes 300,000 of these.
            values.append(FleetValue.model_construct(value=value, hosts=tuple(members), odd=is_odd))
        differences.append(FleetItem.model_construct(item=key, values=tuple(values)))
    ordered_groups = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1]))
    return FleetReport(
        hosts=hosts,
        groups=tuple(FleetGroup(fingerprint=fp, hosts=tuple(m)) for fp, m in ordered_groups),
        differences=tuple(differences),
        odd_hosts=tuple(sorted(odd)),
        baseline=baseline_name,
    )


def load_fleet(paths: list[Path]) -> list[tuple[dict[str, str], str]]:
    """Each snapshot's fleet items and fingerprint; a big fleet (many files, or a few huge
    ones) is read by one process per core, and one bad file stops the rest."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    many = len(paths) >= 100
    if len(paths) < 2 or not cores or cores < 2 or (not many and _size(paths) < BIG):
        return [load_items(str(p)) for p in paths]
    from concurrent.futures import ProcessPoolExecutor

    # Many small files: build the model schemas once, before the fork. A few huge ones:
    # every file goes to the pool, the first included.
    first = [load_items(str(paths[0]))] if many else []
    with ProcessPoolExecutor(max_workers=min(cores, 8)) as pool:
        try:
            rest = [str(p) for p in paths[len(first) :]]
            return [*first, *pool.map(load_items, rest, chunksize=32 if many else 1)]
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


# Past this many bytes of snapshots, validating them outweighs starting a pool (a fleet
# of four 100,000-package snapshots is far past it).
BIG = 32 << 20


def _size(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        with suppress(OSError):  # load_items names the file and what is wrong with it
            total += path.stat().st_size
    return total


def compare_files(paths: list[Path], *, baseline: Snapshot | None = None) -> FleetReport:
    """compare() over snapshot files, labelled by file name (by path when names repeat)."""
    labels = [p.stem for p in paths]
    if len(set(labels)) != len(labels):
        labels = [str(p) for p in paths]
    loaded = dict(zip(labels, load_fleet(paths), strict=True))
    return compare_items(
        {label: found for label, (found, _) in loaded.items()},
        fingerprints={label: fp for label, (_, fp) in loaded.items()},
        baseline=items(baseline) if baseline is not None else None,
        baseline_name=baseline.name if baseline is not None else None,
    )


def load_items(path: str) -> tuple[dict[str, str], str]:
    """The fleet items of one snapshot file (loaded, validated, then let go) and their
    fingerprint: what a worker process sends back, instead of a whole Snapshot."""
    from envguard.snapshots import store

    found = items(store.load(path))
    return found, fingerprint(found)
