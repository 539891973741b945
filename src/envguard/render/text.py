"""Plain-text pieces shared by every format: printable text, the summary, the metrics footer."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from envguard.compare.severity import Severity
from envguard.reading import UNSAFE_CHARS

if TYPE_CHECKING:
    # Types only: error lines use printable() without loading pydantic.
    from envguard.compare.models import Drift
    from envguard.recovery.outcome import Outcome


# C0/C1 controls, DEL, and the bidirectional overrides that reorder what a terminal shows.
# U+2028/U+2029 end a line as surely as "\n" does.
_UNSAFE = re.compile("[" + UNSAFE_CHARS + "]")


def printable(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``), never sent
    to the terminal: snapshots, hosts and files are untrusted."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(lambda m: ascii(m.group(0))[1:-1], text)


def summary(drift: Drift) -> str:
    """`3 critical, 2 warning, 1 info` or `no drift`."""
    if not drift.changes:
        subject = drift.subject or "the environment"
        return f"no drift: {subject} matches {drift.expected_name or 'the snapshot'}"
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
    from envguard.redact import redact_metrics

    shown = redact_metrics(drift.metrics)
    return "last good run: " + ", ".join(f"{k}={v}" for k, v in shown.items())


def rebuild_report(outcome: Outcome) -> str:
    """What `rebuild --execute` says when it is done."""
    lines = [
        f"rebuilt {outcome.venv} from {outcome.snapshot}: {outcome.packages} packages,"
        " verified against the snapshot"
    ]
    if outcome.backup is not None:
        lines.append(f"the previous venv is kept at {outcome.backup}")
    lines += outcome.notes
    lines += [f"not restored: {hint}" for hint in outcome.not_restored]
    return "\n".join(lines)


def host_list(hosts: tuple[str, ...], limit: int = 12) -> str:
    """``a, b, c (+N more)``: a long list of hosts kept to one readable line."""
    shown = ", ".join(hosts[:limit])
    return shown + (f" (+{len(hosts) - limit} more)" if len(hosts) > limit else "")
