"""Plain-text pieces shared by every drift format: the summary and the metrics footer."""

from __future__ import annotations

from envguard.models import Drift, Severity


def summary(drift: Drift) -> str:
    """`3 critical, 2 warning, 1 info` or `no drift`."""
    if not drift.changes:
        return f"no drift: the environment matches {drift.expected_name or 'the snapshot'}"
    counts = {level: 0 for level in Severity}
    for change in drift.changes:
        counts[change.severity] += 1
    parts = [
        f"{counts[lvl]} {lvl.value}"
        for lvl in (Severity.critical, Severity.warning, Severity.info)
        if counts[lvl]
    ]
    return f"drift from {drift.expected_name or 'the snapshot'}: " + ", ".join(parts)


def metrics_footer(drift: Drift) -> str | None:
    if not drift.metrics:
        return None
    return "last good run: " + ", ".join(f"{k}={v}" for k, v in drift.metrics.items())
