"""GitHub Actions workflow commands (`::error` / `::warning` / `::notice`)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from envguard.compare.policy import Policy
from envguard.compare.severity import Severity
from envguard.render.text import printable

if TYPE_CHECKING:
    from envguard.compare.identical import Clean
    from envguard.compare.models import Change, Drift

_COMMAND = {"critical": "error", "warning": "warning", "info": "notice"}


def _escape(text: str) -> str:
    # Workflow-command data escaping, as @actions/core does it; other controls shown escaped.
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return printable(text)


def _escape_property(text: str) -> str:
    return _escape(text).replace(":", "%3A").replace(",", "%2C")


# GitHub shows at most 10 annotations of each kind per step and drops the rest unsaid: 9
# errors and warnings each; the verdict and the line counting what was left out are
# notices, so info changes get 8.
_SHOWN = {"error": 9, "warning": 9, "notice": 8}


def drift_github(
    drift: Drift | Clean,
    *,
    workspace: str | None = None,
    policy: Policy | None = None,
    step_summary: bool = False,
) -> str:
    """The verdict as the first notice, then one annotation per change, worst first (torch
    and the GPU stack before the rest), as many as GitHub shows; one notice counts the rest
    (all in the step summary when ``step_summary``). A change in a lockfile points at its
    file and line when the file lies in ``workspace``, $GITHUB_WORKSPACE."""
    from envguard.render.text import collapsed, severity_counts

    lines = []
    if drift.verdict:  # the lines a person reads first, as one notice
        text = "\n".join(drift.verdict)
        lines.append(f"::notice title=envguard verdict::{_escape(text)}")
    # An install's members are folded into its annotation, as in the table.
    messages, folded = collapsed(drift)
    shown = [c for c in drift.changes if id(c) not in folded]
    rules = policy or Policy()
    shown.sort(key=lambda c: (-c.severity.rank, _stack_rank(c, rules)))  # stable otherwise
    left: dict[str, int] = {}
    for c in shown:
        command = _COMMAND[c.severity.value]
        if left.setdefault(command, _SHOWN[command]) == 0:
            continue
        left[command] -= 1
        props = []
        where = _relative(c.file, workspace) if c.file else None
        if where:
            props.append(f"file={_escape_property(where)}")
            if c.line:
                props.append(f"line={c.line}")
        props.append(f"title={_escape_property(f'envguard {c.section}/{c.kind}')}")
        message = messages.get(id(c), c.message)
        lines.append(f"::{command} {','.join(props)}::{_escape(message)}")
    hidden = Counter(c.severity for c in shown) - Counter(
        {level: _SHOWN[_COMMAND[level.value]] for level in Severity}
    )
    if hidden:
        counts = severity_counts(hidden)
        total = sum(hidden.values())
        listed = "the step summary" if step_summary else "--format markdown"
        text = (
            f"{total} more change{'s' if total != 1 else ''} not annotated ({counts}):"
            f" GitHub shows 10 of a kind per step; {listed} lists every change"
        )
        title = _escape_property("envguard: more changes")
        lines.append(f"::notice title={title}::{_escape(text)}")
    return "\n".join(lines) + ("\n" if lines else "")


def _stack_rank(change: Change, policy: Policy) -> int:
    """0 for torch, 1 for the rest of the GPU stack (driver, CUDA libraries), 2 otherwise."""
    if change.section == "torch" or change.name == "torch":
        return 0
    if change.section == "accelerator" or (
        change.section == "packages" and policy.is_critical_package(change.name)
    ):
        return 1
    return 2


def _relative(path: str, workspace: str | None) -> str | None:
    """``path`` as GitHub places it: relative to the workspace; None when it lies outside
    (GitHub cannot place an annotation there). Without a workspace, a relative path is
    taken as given."""
    import os

    if not workspace:
        return None if os.path.isabs(path) else path
    for resolve in (os.path.abspath, os.path.realpath):
        rel = os.path.relpath(resolve(path), resolve(workspace))
        if rel != ".." and not rel.startswith(".." + os.sep):
            return rel
    return None


def drift_outputs(drift: Drift | Clean) -> str:
    """Step outputs for $GITHUB_OUTPUT: ``drift`` and ``max-severity``."""
    level = drift.max_severity
    drifted = "true" if drift.changes else "false"
    return f"drift={drifted}\nmax-severity={level.value if level else ''}\n"
