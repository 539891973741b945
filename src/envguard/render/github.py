"""GitHub Actions workflow commands (`::error` / `::warning` / `::notice`)."""

from __future__ import annotations

from envguard.compare.models import Drift
from envguard.render.text import printable

_COMMAND = {"critical": "error", "warning": "warning", "info": "notice"}


def _escape(text: str) -> str:
    # Workflow-command data escaping, as @actions/core does it; other controls shown escaped.
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return printable(text)


def _escape_property(text: str) -> str:
    return _escape(text).replace(":", "%3A").replace(",", "%2C")


def drift_github(drift: Drift) -> str:
    lines = []
    for c in drift.changes:
        title = _escape_property(f"envguard {c.section}/{c.kind}")
        lines.append(f"::{_COMMAND[c.severity.value]} title={title}::{_escape(c.message)}")
    return "\n".join(lines) + ("\n" if lines else "")
