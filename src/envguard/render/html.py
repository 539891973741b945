"""`--format html`: one self-contained page for CI artifacts and for sharing: the verdict,
the changes by severity with each install group folded into a <details>, and for a fleet a
grid of hosts by difference. Long cells (paths, hashes, variables) wrap, so the page fits
its window. No script, no external asset; every text is escaped (snapshot text is
untrusted) and a Content-Security-Policy forbids scripts even if one slipped in."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from envguard.render.text import printable

if TYPE_CHECKING:
    from envguard.compare.models import Change, Drift, FleetReport

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;padding:0 1em;max-width:72em;
color:#1d1d1f}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
.verdict{background:#f5f5f7;border-left:4px solid #c00;padding:.6em 1em}
.verdict.clean{border-color:#2a2}
.verdict p{margin:.2em 0}
table{border-collapse:collapse;width:100%;margin:.4em 0}
th,td{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
.changes td:nth-child(n+3){overflow-wrap:anywhere}
.wide{overflow-x:auto}
th{background:#fafafa}
.critical{color:#b00;font-weight:600}.warning{color:#a60}.info{color:#06c}
.odd{background:#fde8e8;font-weight:600}
details{margin:.2em 0}summary{cursor:pointer}
code{font-family:ui-monospace,monospace;font-size:.95em}
"""
_HEAD = (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
    '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
    "style-src 'unsafe-inline'\">"
    '<meta name="viewport" content="width=device-width, initial-scale=1">'
)


def _t(text: object) -> str:
    """Untrusted text as HTML: control characters shown escaped, markup escaped."""
    return escape(printable(str(text)), quote=True)


def _page(title: str, body: list[str]) -> str:
    return (
        f"{_HEAD}<title>{_t(title)}</title><style>{_CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def drift_html(drift: Drift) -> str:
    """The drift report: verdict, then changes by severity, install groups folded."""
    from envguard.compare.models import primary_changes
    from envguard.compare.severity import iter_sections
    from envguard.render.text import metrics_footer, summary

    body = [f"<h1>envguard drift report: {_t(drift.expected_name or 'snapshot')}</h1>"]
    clean = "" if drift.changes else " clean"
    lines = [*drift.verdict, summary(drift)] if drift.changes else [summary(drift)]
    footer = metrics_footer(drift)
    if footer and not drift.verdict:
        lines.append(footer)
    body.append(f'<div class="verdict{clean}" id="verdict">')
    body += [f"<p>{_t(line)}</p>" for line in lines]
    body.append("</div>")
    members = {m for g in drift.groups for m in g.members}
    groups = {g.root: g for g in drift.groups}
    primary = primary_changes(drift.changes)

    def folded(c: Change) -> bool:
        return (
            c.section == "packages"
            and c.name in members
            and c.name not in groups
            and c.severity.value != "critical"
        )

    for level, changes in iter_sections(drift):
        shown = [c for c in changes if not folded(c)]
        if not shown:
            continue  # all of them are inside their install's <details>
        body.append(f'<h2 class="{level.value}">{_t(level.value)} ({len(shown)})</h2>')
        body.append(
            '<table class="changes"><tr><th>section</th><th>change</th><th>name</th>'
            "<th>expected</th><th>actual</th><th>what</th></tr>"
        )
        for c in shown:
            body.append(_change_row(c))
            group = groups.get(c.name) if c.section == "packages" else None
            if group is not None and primary.get(c.name) is c:
                wanted = set(group.members)
                inner = [m for m in drift.changes if m.section == "packages" and m.name in wanted]
                count = len({m.name for m in inner})
                body.append(
                    f'<tr><td colspan="6"><details><summary>{count} package'
                    f"{'s' if count != 1 else ''} {_t(c.name)} pulled in</summary>"
                    '<table class="changes">'
                    + "".join(_change_row(m) for m in inner)
                    + "</table></details></td></tr>"
                )
        body.append("</table>")
    for note in drift.notes:
        body.append(f"<p><em>note: {_t(note)}</em></p>")
    return _page(f"envguard drift: {summary(drift)}", body)


def _change_row(c: Change) -> str:
    cells = [c.section, c.kind, c.name, c.expected or "", c.actual or "", c.message]
    tds = "".join(f"<td>{_t(cell)}</td>" for cell in cells)
    return f'<tr class="{c.severity.value}">{tds}</tr>'


def fleet_html(report: FleetReport) -> str:
    """The fleet as a grid: one row per item that differs, one column per host, the odd
    ones out marked."""
    from envguard.render.text import host_list

    hosts = list(report.hosts)
    body = ["<h1>envguard fleet report</h1>"]
    verdict = (
        f"all {len(hosts)} hosts agree"
        if report.agree
        else f"{len(report.groups)} distinct environments across {len(hosts)} hosts;"
        f" odd ones out: {host_list(report.odd_hosts)}"
        + (f"; {len(report.failed)} failed" if report.failed else "")
    )
    clean = " clean" if report.agree else ""
    body.append(f'<div class="verdict{clean}" id="verdict"><p>{_t(verdict)}</p></div>')
    if report.failed:
        body.append("<h2>failed hosts</h2><table><tr><th>host</th><th>why</th></tr>")
        body += [f"<tr><td>{_t(f.host)}</td><td>{_t(f.reason)}</td></tr>" for f in report.failed]
        body.append("</table>")
    body.append("<h2>environments</h2><table><tr><th>group</th><th>hosts</th></tr>")
    for g in report.groups:
        body.append(
            f"<tr><td><code>{_t(g.fingerprint)}</code></td><td>{_t(', '.join(g.hosts))}</td></tr>"
        )
    body.append("</table>")
    if report.differences:
        # One column per host: a large fleet scrolls inside its box, not the page.
        body.append('<h2>what differs</h2><div class="wide"><table><tr><th>item</th>')
        body += [f"<th>{_t(h)}</th>" for h in hosts]
        body.append("</tr>")
        for d in report.differences:
            value_of = {h: v for v in d.values for h in v.hosts}
            cells = []
            for h in hosts:
                v = value_of.get(h)
                odd = ' class="odd"' if v is not None and v.odd else ""
                cells.append(f"<td{odd}>{_t(v.value) if v is not None else ''}</td>")
            body.append(f"<tr><th>{_t(d.item)}</th>{''.join(cells)}</tr>")
        body.append("</table></div>")
    return _page(f"envguard fleet: {verdict}", body)
