"""Pure N-way comparison: group hosts by environment and find the odd ones out."""

from __future__ import annotations

import hashlib
import json
import marshal
from collections import Counter, defaultdict
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from envguard.compare.models import FleetFailure, FleetGroup, FleetItem, FleetReport, FleetValue
from envguard.compare.sections import REGISTRY
from envguard.compare.sections.interpreter import ABSENT
from envguard.errors import EnvguardError, UsageError, field_path
from envguard.redact import redact_text
from envguard.snapshots import store
from envguard.snapshots.fanout import (
    Gathered,
    NodeDocument,
    NodeFailed,
    Source,
    label,
    no_report,
    read_document,
    snapshot_data,
)
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
) -> FleetReport:
    """compare() over already-extracted items."""
    fingerprints = {host: fingerprint(found) for host, found in per_host.items()}
    samples: dict[str, dict[str, str]] = {}
    for host in sorted(per_host):
        samples.setdefault(fingerprints[host], per_host[host])
    return compare_groups(
        fingerprints, samples, baseline=baseline, baseline_name=baseline_name, failed={}
    )


def compare_groups(
    fingerprints: dict[str, str],
    samples: dict[str, dict[str, str]],
    *,
    baseline: dict[str, str] | None,
    baseline_name: str | None,
    failed: dict[str, str],
) -> FleetReport:
    """The comparison of hosts by fingerprint, with one host's items per fingerprint
    (``samples``): a large fleet never holds every host's items, and each item is read once
    per distinct environment, not once per host. ``failed``: hosts with no environment to
    compare, and why; rows of the report."""
    groups: dict[str, list[str]] = defaultdict(list)
    for host in sorted(fingerprints):
        groups[fingerprints[host]].append(host)
    sample = {fp: samples[fp] for fp in groups}
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
        hosts=tuple(sorted({*fingerprints, *failed})),
        groups=tuple(FleetGroup(fingerprint=fp, hosts=tuple(m)) for fp, m in ordered_groups),
        differences=tuple(differences),
        odd_hosts=tuple(sorted(odd)),
        baseline=baseline_name,
        failed=tuple(FleetFailure(host=h, reason=redact_text(failed[h])) for h in sorted(failed)),
    )


@dataclass(frozen=True)
class NodeItems:
    """What reading one node sends back: its fingerprint and, the first time a process
    meets that fingerprint, its items (the parent keeps one copy per environment); or why
    the node has no environment to compare."""

    host: str
    fingerprint: str | None = None
    items: dict[str, str] | None = None
    failure: str | None = None


# Per process: a node's environment (its document less the fields that differ on every
# node: names, times) -> (fingerprint, items). A node that repeats an environment already
# validated is not validated again; 10,000 nodes in a few groups validate a few documents.
_SEEN: dict[str, tuple[str, dict[str, str]]] = {}
# Per process and per call: the fingerprints whose items went back already.
_SENT: dict[str, set[str]] = {}
_VOLATILE = {
    "snapshot": frozenset(
        {"name", "created", "host", "user", "envguard_version", "command", "via", "note"}
        | {"metrics", "warnings"}
    ),
    "report": frozenset({"host", "user", "warnings"}),
}


def load_node(job: tuple[Source, int, str]) -> NodeItems:
    """One node of a fleet (``job``: its source, its index, the call's token)."""
    source, index, call = job
    found: NodeDocument | None = None
    try:
        found = read_document(source)
        host = label(source, found, index)
        fp, values = _environment(found, host)
    except EnvguardError as exc:
        host = label(source, found, index)
        return NodeItems(host, failure=exc.message.removeprefix(f"{host}: "))
    sent = _SENT.setdefault(call, set()) if call in _SENT else _new_call(call)
    first = fp not in sent
    sent.add(fp)
    return NodeItems(host, fp, values if first else None)


def _new_call(call: str) -> set[str]:
    _SENT.clear()
    return _SENT.setdefault(call, set())


def _environment(found: NodeDocument, host: str) -> tuple[str, dict[str, str]]:
    volatile = _VOLATILE[found.kind]
    kept = [(k, v) for k, v in found.data.items() if k not in volatile]
    # marshal's version 2 writes plain values (no back-references), so equal bytes are
    # equal values; it is several times faster than json's encoder on a 400-package list.
    try:
        key = hashlib.sha256(marshal.dumps((found.kind, kept), 2)).hexdigest()
    except ValueError:  # nested too deeply to marshal: validated, and its error said
        key = ""
    if key in _SEEN:
        return _SEEN[key]
    if found.kind == "snapshot":
        snap = store.from_data(found.data, source=host)
    else:
        snap = _report_snapshot(found, host)
    values = items(snap)
    environment = fingerprint(values), values
    if key:
        if len(_SEEN) >= 256:
            _SEEN.clear()
        _SEEN[key] = environment
    return environment


def _report_snapshot(found: NodeDocument, host: str) -> Snapshot:
    from pydantic import ValidationError

    from envguard.snapshots.document import typed

    try:
        return typed(snapshot_data(found, host=host))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise NodeFailed(
            f"the report does not fit a snapshot at {field_path(first['loc'])}: {first['msg']}"
        ) from None


def load_fleet(
    found: Gathered, *, expected: Sequence[str] = ()
) -> tuple[dict[str, str], dict[str, dict[str, str]], dict[str, str]]:
    """(host -> fingerprint, fingerprint -> items, host -> why it failed) of every node
    found, and of every host ``expected`` or named by the engine that sent nothing; a big
    fleet is read by one process per core."""
    import os

    call = os.urandom(8).hex()
    jobs = [(source, i, call) for i, source in enumerate(found.sources)]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    many = len(jobs) >= 100
    if len(jobs) < 2 or not cores or cores < 2 or (not many and _size(found.sources) < BIG):
        results = [load_node(job) for job in jobs]
    else:
        results = _in_pool(jobs, cores=cores, many=many)
    fingerprints: dict[str, str] = {}
    samples: dict[str, dict[str, str]] = {}
    failed: dict[str, str] = {}
    for result in results:
        if result.host in fingerprints or result.host in failed:
            continue  # a node that answered twice: its first answer counts
        if result.fingerprint is None:
            failed[result.host] = result.failure or "failed"
            continue
        fingerprints[result.host] = result.fingerprint
        if result.items is not None:
            samples.setdefault(result.fingerprint, result.items)
    for host in [*expected, *found.silent()]:
        if host not in fingerprints and host not in failed:
            failed[host] = no_report(host, found)
    for host, why in failed.items():
        if why == "no report (empty output)" and (host in found.engine or host in found.said):
            failed[host] = no_report(host, found)  # srun --output left an empty file
    return fingerprints, samples, failed


def _in_pool(jobs: list[tuple[Source, int, str]], *, cores: int, many: bool) -> list[NodeItems]:
    from concurrent.futures import ProcessPoolExecutor

    # Many small documents: build the model schemas once, before the fork. A few huge ones:
    # every document goes to the pool, the first included.
    first = [load_node(jobs[0])] if many else []
    with ProcessPoolExecutor(max_workers=min(cores, 8)) as pool:
        try:
            rest = jobs[len(first) :]
            return [*first, *pool.map(load_node, rest, chunksize=32 if many else 1)]
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


# Past this many bytes of snapshots, validating them outweighs starting a pool (a fleet
# of four 100,000-package snapshots is far past it).
BIG = 32 << 20


def _size(sources: list[Source]) -> int:
    total = 0
    for source in sources:
        if source.size is not None:
            total += source.size
            continue
        with suppress(OSError):  # read_document names the file and what is wrong with it
            total += Path(source.path).stat().st_size
    return total


def compare_nodes(
    found: Gathered, *, baseline: Snapshot | None = None, expected: Sequence[str] = ()
) -> FleetReport:
    """compare() over the nodes an engine's fan-out (or a capture) left behind."""
    fingerprints, samples, failed = load_fleet(found, expected=expected)
    if not fingerprints and not failed:
        said = found.wide[-1] if found.wide else "no line of a node's report in it"
        raise UsageError(f"no node answered: {said}")
    return compare_groups(
        fingerprints,
        samples,
        baseline=items(baseline) if baseline is not None else None,
        baseline_name=baseline.name if baseline is not None else None,
        failed=failed,
    )
