"""Machine-readable output (`--format json`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from envguard.compare.identical import Clean
    from envguard.compare.models import Drift, FleetReport
    from envguard.snapshots.history import Entry
    from envguard.snapshots.models import Fit
    from envguard.snapshots.store import Listed


# json.dumps with an indent runs the pure-Python encoder (several seconds for a 100,000-change
# drift); past this many entries the document is written compact, by the C encoder. The
# content is the same: whitespace is not part of the format.
INDENT_ENTRIES = 5000
# Every JSON document names its schema (schema/*.json, `envguard schema KIND`) and version.
DRIFT_SCHEMA_VERSION = 1
FLEET_SCHEMA_VERSION = 1
LIST_SCHEMA_VERSION = 1
LOG_SCHEMA_VERSION = 1
FIT_SCHEMA_VERSION = 1


def _dumps(doc: object, entries: int) -> str:
    if entries > INDENT_ENTRIES:
        return json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def snapshot_list(rows: list[Listed]) -> str:
    out: list[dict[str, Any]] = []
    for row in rows:
        path, snap, error = row.path, row.snapshot, row.error
        if snap is None:
            out.append({"path": str(path), "error": error})
            continue
        out.append(
            {
                "path": str(path),
                "name": snap.name,
                "created": snap.created.isoformat(),
                "torch": snap.torch.version if snap.torch else None,
                "packages": sum(not p.shadowed for p in snap.packages),
                "metrics": snap.metrics,
            }
        )
    doc = {"schema": "envguard.list", "schema_version": LIST_SCHEMA_VERSION, "snapshots": out}
    return _dumps(doc, len(out))


def drift_json(drift: Drift | Clean) -> str:
    """`{"drift", "max_severity", "changes", "metrics"}` for machines."""
    level = drift.max_severity
    doc = {
        "schema": "envguard.drift",
        "schema_version": DRIFT_SCHEMA_VERSION,
        "drift": bool(drift.changes),
        "max_severity": level.value if level else None,
        "expected": drift.expected_name,
        "actual": drift.actual_name,
        "changes": [
            {
                "section": c.section,
                "kind": c.kind,
                "name": c.name,
                "expected": c.expected,
                "actual": c.actual,
                "severity": c.severity.value,
                "message": c.message,
                "file": c.file,
                "line": c.line,
                "groups": list(c.groups),
                "scope": list(c.scope),
            }
            for c in drift.changes
        ],
        "metrics": drift.metrics,
        "subject": drift.subject,
        "notes": list(drift.notes),
        "verdict": list(drift.verdict),
        "groups": [{"root": g.root, "members": list(g.members)} for g in drift.groups],
    }
    return _dumps(doc, len(drift.changes))


def fleet_json(report: FleetReport) -> str:
    doc = {
        "schema": "envguard.fleet",
        "schema_version": FLEET_SCHEMA_VERSION,
        "agree": report.agree,
        "hosts": list(report.hosts),
        "baseline": report.baseline,
        "groups": [{"fingerprint": g.fingerprint, "hosts": list(g.hosts)} for g in report.groups],
        "differences": [
            {
                "item": d.item,
                "values": [
                    {"value": v.value, "hosts": list(v.hosts), "odd": v.odd} for v in d.values
                ],
            }
            for d in report.differences
        ],
        "odd_hosts": list(report.odd_hosts),
        "failed": [{"host": f.host, "reason": f.reason} for f in report.failed],
    }
    return _dumps(doc, len(report.differences) + len(report.hosts))


def log_json(entries: list[Entry]) -> str:
    """`envguard log --format json`."""
    from envguard.redact import redact_metrics

    rows: list[dict[str, Any]] = []
    for e in entries:
        if e.error is not None:
            rows.append({"path": str(e.path), "error": e.error})
            continue
        rows.append(
            {
                "path": str(e.path),
                "name": e.name,
                "created": e.created.isoformat() if e.created else None,
                "torch": e.torch,
                "packages": e.packages,
                "metrics": redact_metrics(e.metrics),
                "change": e.change,
            }
        )
    doc = {"schema": "envguard.log", "schema_version": LOG_SCHEMA_VERSION, "snapshots": rows}
    return _dumps(doc, len(rows))


def fit_json(fit: Fit, *, warnings: tuple[str, ...] = (), no_kernel: Sequence[str] = ()) -> str:
    """`envguard fit --format json`: each extension that cannot load, and why; each with no
    kernel for this node's GPU (``no_kernel``)."""
    from envguard.compare.sections.fit import cannot_load

    broken = [
        {**unfit.model_dump(mode="json"), "message": cannot_load(unfit)} for unfit in fit.broken
    ]
    doc = {
        "schema": "envguard.fit",
        "schema_version": FIT_SCHEMA_VERSION,
        "loads": not fit.broken and not no_kernel,
        "checked": fit.checked,
        "broken": broken,
        "no_kernel": list(no_kernel),
        "warnings": list(warnings),
    }
    return _dumps(doc, len(broken))
