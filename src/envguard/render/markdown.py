"""Markdown drift report, for PR comments and the GitHub step summary."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from envguard.compare.severity import iter_sections
from envguard.render.text import metrics_footer, printable, summary

if TYPE_CHECKING:
    from envguard.compare.identical import Clean
    from envguard.compare.models import Drift, FleetReport
    from envguard.snapshots.history import Entry

_ICON = {"critical": "🔴", "warning": "🟠", "info": "🔵"}


# Everything Markdown (and the HTML GitHub allows in it) could turn into markup: a link, an
# image, a tag, a code span, a table cell break. Escaped, the text shows as written.
_MARKUP = re.compile(r"([\\`*_\[\]!|~])")


def _cell(text: str | None) -> str:
    text = printable((text or "").replace("\r", " ").replace("\n", " "))
    text = text.replace("&", "&amp;").replace("<", "&lt;")  # no tag can open without "<"
    return _MARKUP.sub(r"\\\1", text)


def drift_markdown(drift: Drift | Clean) -> str:
    lines = ["## envguard drift report", "", f"**{_cell(summary(drift))}**", ""]
    if drift.verdict:
        lines += [f"- {_cell(line)}" for line in drift.verdict] + [""]
    from envguard.render.text import collapsed

    # Folded as the terminal table is: an install's row counts what it pulled in, the
    # list is in the <details> below (critical changes are never folded).
    messages, folded = collapsed(drift)
    for level, all_changes in iter_sections(drift):
        changes = [c for c in all_changes if id(c) not in folded]
        if not changes:
            continue
        lines += [f"### {_ICON[level.value]} {level.value} ({len(changes)})", ""]
        lines += [
            "| section | change | name | expected | actual | why |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for c in changes:
            why = messages.get(id(c), c.message)
            lines.append(
                f"| {c.section} | {c.kind} | {_cell(c.name)} | {_cell(c.expected)} |"
                f" {_cell(c.actual)} | {_cell(why)} |"
            )
        lines.append("")
    if drift.groups:
        from envguard.render.text import group_tree

        lines += ["<details><summary>what each install pulled in</summary>", ""]
        lines += [f"    {printable(line)}" for line in group_tree(drift)]  # a code block
        lines += ["", "</details>", ""]
    footer = metrics_footer(drift)
    if footer:
        lines += [f"_{_cell(footer)}_", ""]
    return "\n".join(lines)


def fleet_markdown(report: FleetReport) -> str:
    from envguard.render.text import fleet_digest

    lines = ["## envguard fleet report", ""]
    if report.agree:
        lines += [f"**all {len(report.hosts)} hosts agree**", ""]
        return "\n".join(lines)
    digest = fleet_digest(report)
    lines += [f"**{_cell(digest.summary)}**", ""]
    if report.failed:
        lines += ["| failed host | why |", "| --- | --- |"]
        lines += [f"| {_cell(f.host)} | {_cell(f.reason)} |" for f in report.failed]
        lines.append("")
    if digest.rows:
        lines += ["| item | value | hosts | |", "| --- | --- | --- | --- |"]
        lines += [f"| {' | '.join(_cell(c) for c in row)} |" for row in digest.rows]
        lines.append("")
    return "\n".join(lines)


def log_markdown(entries: list[Entry], *, metric: str | None = None) -> str:
    """`envguard log --format markdown`."""
    from envguard.redact import redact_metrics
    from envguard.snapshots.history import metric_value, sparkline

    bars = sparkline([metric_value(e, metric) for e in entries]) if metric else []
    head = metric or "metrics"
    lines = [
        "## envguard log",
        "",
        f"| created | name | torch | {_cell(head)} | change since the previous |",
        "| --- | --- | --- | --- | --- |",
    ]
    for i, e in enumerate(entries):
        if e.error is not None:
            lines.append(f"| - | {_cell(e.path.stem)} | - | - | unreadable: {_cell(e.error)} |")
            continue
        from envguard.render.table import _age

        created = _age(e.created) if e.created else "-"
        if metric:
            value = e.metrics.get(metric)
            shown = f"{bars[i]} {value}" if value is not None else "-"
        else:
            shown = ", ".join(f"{k}={v}" for k, v in redact_metrics(e.metrics).items()) or "-"
        lines.append(
            f"| {created} | {_cell(e.name)} | {_cell(e.torch or '-')} | {_cell(shown)} |"
            f" {_cell(e.change)} |"
        )
    return "\n".join(lines) + "\n"
