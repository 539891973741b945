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


def drift_github(drift: Drift, *, workspace: str | None = None) -> str:
    """One annotation per change; a change in a lockfile points at its file and line
    (relative to ``workspace``, $GITHUB_WORKSPACE, as GitHub expects)."""
    from envguard.render.text import collapsed

    lines = []
    if drift.verdict:  # the lines a person reads first, as one notice
        text = "\n".join(drift.verdict)
        lines.append(f"::notice title=envguard verdict::{_escape(text)}")
    # An install's members are folded into its annotation, as in the table.
    messages, folded = collapsed(drift)
    for c in drift.changes:
        if id(c) in folded:
            continue
        props = []
        if c.file:
            props.append(f"file={_escape_property(_relative(c.file, workspace))}")
            if c.line:
                props.append(f"line={c.line}")
        props.append(f"title={_escape_property(f'envguard {c.section}/{c.kind}')}")
        message = messages.get(id(c), c.message)
        lines.append(f"::{_COMMAND[c.severity.value]} {','.join(props)}::{_escape(message)}")
    return "\n".join(lines) + ("\n" if lines else "")


def _relative(path: str, workspace: str | None) -> str:
    import os

    if workspace:  # a path given relative to the working directory, which may lie below it
        rel = os.path.relpath(os.path.abspath(path), workspace)
        if not rel.startswith(".."):
            return rel
    return path


def drift_outputs(drift: Drift) -> str:
    """Step outputs for $GITHUB_OUTPUT: ``drift`` and ``max-severity``."""
    level = drift.max_severity
    drifted = "true" if drift.changes else "false"
    return f"drift={drifted}\nmax-severity={level.value if level else ''}\n"
