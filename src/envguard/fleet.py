"""Pure N-way comparison: group hosts by environment and find the odd ones out."""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict

from envguard.models import Model, Snapshot


class FleetValue(Model):
    value: str
    hosts: tuple[str, ...]
    odd: bool


class FleetItem(Model):
    item: str
    values: tuple[FleetValue, ...]


class FleetGroup(Model):
    fingerprint: str
    hosts: tuple[str, ...]


class FleetReport(Model):
    hosts: tuple[str, ...]
    groups: tuple[FleetGroup, ...]
    differences: tuple[FleetItem, ...]
    odd_hosts: tuple[str, ...]
    baseline: str | None = None

    @property
    def agree(self) -> bool:
        return not self.differences


ABSENT = "(absent)"
# Where the venv lives is not part of what it is (diff rates it info for the same reason).
PATH_VARS = frozenset({"VIRTUAL_ENV"})


def items(snap: Snapshot) -> dict[str, str]:
    """What must be equal on every node, as item -> value (paths, times and sizes left out)."""
    i = snap.interpreter
    out = {
        "python": f"{i.implementation} {i.version}",
        "machine": i.machine,
        "libc": i.libc or ABSENT,
    }
    for pkg in snap.packages:
        if pkg.shadowed:
            continue
        value = pkg.version
        src = pkg.source
        if src.kind == "vcs":
            value += f" @ {src.url}@{(src.commit or '')[:12]}"
        elif src.kind != "index":
            value += f" ({src.kind})"
        out[f"package {pkg.name}"] = value
    if snap.torch is not None:
        t = snap.torch
        for key in ("cuda", "hip", "git_version", "cudnn", "nccl", "cublas", "triton"):
            out[f"torch {key}"] = str(getattr(t, key) or ABSENT)
    a = snap.accelerator
    out["driver"] = a.driver or ABSENT
    out["gpus"] = f"{a.count} x {', '.join(sorted(set(a.gpus)))}" if a.gpus else "0"
    for name, value in snap.env.items():
        if name not in PATH_VARS:
            out[f"env {name}"] = value
    for repo in snap.repos:
        state = (repo.head or "no commit")[:12]
        if repo.dirty:
            state += f" dirty:{(repo.diff_sha256 or '')[:8]}"
        out[f"repo {repo.path}"] = state
    for f in snap.files:
        out[f"file {f.path}"] = (f.sha256 or "missing")[:12]
    for c in snap.caches:
        # Default caches by kind (their paths name the user); --cache dirs by path.
        key = f"cache {c.kind}" if c.kind in ("inductor", "triton") else f"cache {c.path}"
        out[key] = "warm" if c.exists and c.files else "cold"
    return out


def fingerprint(values: dict[str, str]) -> str:
    """A stable hash of a host's items: equal environments, equal fingerprints."""
    # JSON, not a hand-made separator: no value can imitate another item.
    text = json.dumps(sorted(values.items()), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


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
            values.append(FleetValue(value=value, hosts=tuple(members), odd=is_odd))
        differences.append(FleetItem(item=key, values=tuple(values)))
    ordered_groups = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1]))
    return FleetReport(
        hosts=hosts,
        groups=tuple(FleetGroup(fingerprint=fp, hosts=tuple(m)) for fp, m in ordered_groups),
        differences=tuple(differences),
        odd_hosts=tuple(sorted(odd)),
        baseline=baseline_name,
    )


def load_items(path: str) -> tuple[dict[str, str], str]:
    """The fleet items of one snapshot file (loaded, validated, then let go) and their
    fingerprint: what a worker process sends back, instead of a whole Snapshot."""
    from envguard import store

    found = items(store.load(path))
    return found, fingerprint(found)
