"""Markdown drift report, for PR comments and the GitHub step summary."""

from __future__ import annotations

from envguard.compare.engine import iter_sections
from envguard.compare.models import Drift, FleetReport
from envguard.render.text import host_list, metrics_footer, summary

_ICON = {"critical": "🔴", "warning": "🟠", "info": "🔵"}


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def drift_markdown(drift: Drift) -> str:
    lines = ["## envguard drift report", "", f"**{summary(drift)}**", ""]
    for level, changes in iter_sections(drift):
        lines += [f"### {_ICON[level.value]} {level.value} ({len(changes)})", ""]
        lines += [
            "| section | change | name | expected | actual | why |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for c in changes:
            lines.append(
                f"| {c.section} | {c.kind} | `{_cell(c.name)}` | {_cell(c.expected)} |"
                f" {_cell(c.actual)} | {_cell(c.message)} |"
            )
        lines.append("")
    footer = metrics_footer(drift)
    if footer:
        lines += [f"_{footer}_", ""]
    return "\n".join(lines)


def fleet_markdown(report: FleetReport) -> str:
    lines = ["## envguard fleet report", ""]
    if report.agree:
        lines += [f"**all {len(report.hosts)} hosts agree**", ""]
        return "\n".join(lines)
    lines += [
        f"**{len(report.groups)} distinct environments across {len(report.hosts)} hosts;"
        f" odd ones out: {host_list(report.odd_hosts)}**",
        "",
        "| item | value | hosts | |",
        "| --- | --- | --- | --- |",
    ]
    for d in report.differences:
        for v in d.values:
            mark = "odd one out" if v.odd else ""
            lines.append(
                f"| {_cell(d.item)} | {_cell(v.value)} | {_cell(host_list(v.hosts))} | {mark} |"
            )
    lines.append("")
    return "\n".join(lines)
