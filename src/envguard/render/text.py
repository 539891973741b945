"""Plain-text pieces shared by every format: printable text, the summary, the metrics footer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from envguard.compare.severity import Severity
from envguard.reading import escaped_line

TYPE_CHECKING = False  # typing is not loaded for a command's start

if TYPE_CHECKING:
    from envguard.compare.identical import Clean

    # Types only: error lines use printable() without loading pydantic.
    from envguard.compare.models import (
        Change,
        ChangeGroup,
        Drift,
        FleetItem,
        FleetReport,
        FleetValue,
    )
    from envguard.recovery.outcome import Item, Outcome, RestoreReport, Warmup
    from envguard.snapshots.document import Document


def printable(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``), never sent
    to the terminal: snapshots, hosts and files are untrusted. GitHub's runner reads a
    workflow command from a line that starts with ``::`` (::error, ::add-mask,
    ::stop-commands), and the older ``##[command]`` anywhere in a line; a terminal or a
    table may wrap text at any point, so every ``::`` and ``##[`` gets a zero-width space
    between its characters: it reads the same, and no runner takes it for a command."""
    text = escaped_line(text)
    if "::" in text or "##[" in text:
        text = text.replace("::", ":\u200b:").replace("##[", "#\u200b#[")
    return text


def summary(drift: Drift | Clean, *, expand: bool = False) -> str:
    """`3 critical, 2 warnings, 1 info` or `no drift`: the rows as shown, then the changes
    folded into an install's row (``collapsed``) counted apart, so the figures are the
    rows a person sees and add up to the changes the JSON lists."""
    from envguard.compare.identical import Clean

    if isinstance(drift, Clean) or not drift.changes:
        subject = drift.subject or "the environment"
        return f"no drift: {subject} matches {drift.expected_name or 'the snapshot'}"
    _, folded = collapsed(drift, expand=expand)
    counts = Counter(c.severity for c in drift.changes if id(c) not in folded)
    text = f"drift from {drift.expected_name or 'the snapshot'}: " + severity_counts(counts)
    if folded:
        hidden = Counter(c.severity for c in drift.changes if id(c) in folded)
        text += f" (plus {severity_counts(hidden)} in install rows)"
    return text


def severity_counts(counts: Mapping[Severity, int]) -> str:
    """`3 critical, 2 warnings, 1 info`, worst first, levels with none left out."""
    parts = [
        f"{counts[lvl]} {lvl.value}{'s' if lvl is Severity.warning and counts[lvl] != 1 else ''}"
        for lvl in (Severity.critical, Severity.warning, Severity.info)
        if counts.get(lvl)
    ]
    return ", ".join(parts)


def collapsed(drift: Drift | Clean, *, expand: bool = False) -> tuple[dict[int, str], set[int]]:
    """How the drift's install groups show: (message per change id, where it differs; ids of
    changes folded into their group's row). Critical changes are never folded; with
    ``expand`` nothing is, and each member names what pulled it in."""
    shown: dict[int, str] = {}
    folded: set[int] = set()
    if not drift.groups:
        return shown, folded
    from envguard.compare.models import primary_changes

    roots = {g.root: g for g in drift.groups}
    by_name = primary_changes(drift.changes)
    # A package two installs pulled in is folded into one row: the bigger install's (the
    # verdict's order), so the rows' counts add up to the changes folded.
    home: dict[str, str] = {}
    for group in sorted(drift.groups, key=lambda g: (-len(g.members), g.root)):
        for name in group.members:
            home.setdefault(name, group.root)
    for c in drift.changes:
        if c.section != "packages" or not c.groups:
            continue
        if c.name in roots:
            if by_name.get(c.name) is c:
                note = _folded_note(roots[c.name], by_name, home, expand=expand)
                if note:
                    shown[id(c)] = f"{c.message}; {note}"
            continue
        if _kept(c, expand):
            shown[id(c)] = f"{c.message} (pulled in by {', '.join(c.groups)})"
        else:
            folded.add(id(c))
    return shown, folded


def _folded_note(
    group: ChangeGroup, by_name: dict[str, Change], home: dict[str, str], *, expand: bool
) -> str | None:
    """``with 135 packages it pulled in (132 folded into this row, 3 in rows of their
    own; ...)``: the install's whole count, as the verdict gives it, then where each of
    those packages shows; None when none is folded."""
    own = [m for m in group.members if m in by_name and _kept(by_name[m], expand)]
    folded = [m for m in group.members if m not in own]
    if not folded:
        return None
    n = len(group.members)
    pulled = f"with {n} package{'s' if n != 1 else ''} it pulled in"
    here = sum(1 for m in folded if home.get(m, group.root) == group.root)
    if here == n:
        return f"{pulled}, folded into this row (--expand lists them)"
    elsewhere = Counter(home[m] for m in folded if home.get(m, group.root) != group.root)
    parts = [f"{here} folded into this row"] if here else []
    for root, k in sorted(elsewhere.items()):
        parts.append(f"{k} {'into' if parts else 'folded into'} {root}'s row")
    if own:
        parts.append(f"{len(own)} in rows of their own")
    return f"{pulled} ({', '.join(parts)}; --expand lists them)"


def group_tree(drift: Drift | Clean) -> list[str]:
    """Each install and what it pulled in, as a tree (as `uv pip tree --invert` reads)."""
    from envguard.compare.models import primary_changes

    by_name = primary_changes(drift.changes)
    lines: list[str] = []
    for group in drift.groups:
        root = by_name.get(group.root)
        lines.append(f"{group.root} {root.actual or '' if root else ''}".rstrip())
        for i, name in enumerate(group.members):
            c = by_name.get(name)
            branch = "└─" if i == len(group.members) - 1 else "├─"
            what = f"{c.actual or ''} ({c.kind.replace('_', ' ')})" if c else ""
            lines.append(f"  {branch} {name} {what}".rstrip())
    return lines


def _kept(change: Change, expand: bool) -> bool:
    return expand or change.severity is Severity.critical


def metrics_footer(drift: Drift | Clean) -> str | None:
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
        from envguard.units import human_size

        size = f", {human_size(outcome.backup_bytes)}" if outcome.backup_bytes is not None else ""
        lines.append(
            f"the previous venv is kept at {outcome.backup}{size}"
            " (--keep-backups N keeps N of them, --no-backup none)"
        )
    lines += outcome.notes
    lines += [f"not restored: {hint}" for hint in outcome.not_restored]
    return "\n".join(lines)


def host_list(hosts: tuple[str, ...], limit: int = 12) -> str:
    """``a, b, c (+N more)``: a long list of hosts kept to one readable line."""
    shown = ", ".join(hosts[:limit])
    return shown + (f" (+{len(hosts) - limit} more)" if len(hosts) > limit else "")


@dataclass(frozen=True)
class FleetDigest:
    """The fleet's differences as a screen shows them: items that differ on the same hosts
    in the same way are one block, its first few listed and the rest counted (one host
    missing 400 packages is a few rows and a count, not 800 rows); and the verdict line."""

    rows: list[tuple[str, str, str, str]]
    summary: str


# Items listed per block of items that differ on the same hosts.
_PER_BLOCK = 3


def _value_hosts(value: FleetValue) -> str:
    """The hosts holding a value: the odd ones by name, the many by their count."""
    if value.odd or len(value.hosts) <= 3:
        return host_list(value.hosts)
    return f"{len(value.hosts)} hosts"


def fleet_digest(report: FleetReport) -> FleetDigest:
    """The rows and verdict line of a fleet report (table and Markdown)."""
    blocks: dict[tuple[tuple[str, ...], ...], list[FleetItem]] = {}
    for d in report.differences:
        blocks.setdefault(tuple(v.hosts for v in d.values if v.odd), []).append(d)
    rows: list[tuple[str, str, str, str]] = []
    for block in blocks.values():
        for d in block[:_PER_BLOCK]:
            for v in d.values:
                mark = "odd one out" if v.odd else ""
                rows.append((d.item, v.value, _value_hosts(v), mark))
        if len(block) > _PER_BLOCK:
            more = len(block) - _PER_BLOCK
            rows.append((f"(+{more} more items differing on the same hosts)", "", "", ""))
    against = f" (against {report.baseline})" if report.baseline else ""
    summary = (
        f"{len(report.groups)} distinct environments across {len(report.hosts)} hosts;"
        f" odd ones out{against}: {host_list(report.odd_hosts) or 'none'}"
    )
    if report.failed:
        failed = tuple(f.host for f in report.failed)
        summary += f"; {len(failed)} failed: {host_list(failed)}"
    return FleetDigest(rows=rows, summary=summary)


def restore_report(report: RestoreReport) -> str:
    """What `envguard restore` planned or did, one line per item (status first), with how
    each write was verified and where the displaced version is kept on the lines below.
    Plain text: a restore of hundreds of files prints at once, and reads at any width."""
    done = "restored" if report.executed else "restore plan"
    lines = [printable(f"{done} from snapshot {report.snapshot} on {report.target}")]
    width = max((len(_what(i)) for i in report.items), default=0)
    for item in report.items:
        lines.append(printable(f"  {item.status:<9} {_what(item):<{width}}  {item.detail}"))
        pad = " " * (14 + width)
        if item.verified:
            lines.append(printable(f"{pad}verified: {item.verified}"))
        if item.sha256:
            lines.append(printable(f"{pad}sha256 {item.sha256}"))
            lines.append(printable(f"{pad}md5    {item.md5}"))
        if item.kept:
            lines.append(printable(f"{pad}kept: {item.kept}"))
    lines += [printable(note) for note in report.notes]
    if not report.executed:
        lines.append("nothing was changed; pass --execute to run it")
    elif not report.ok:
        lines.append("some items were not restored (see above); the others were")
    return "\n".join(lines)


def warmup_line(done: Warmup) -> str:
    """``warm-up: 4.3 s (exit 0)``: what `restore --warm CMD` took."""
    if done.code is None:
        return f"warm-up: stopped after {done.seconds:g} s (--warm-timeout {done.timeout:g})"
    return f"warm-up: {done.seconds:g} s (exit {done.code})"


def _what(item: Item) -> str:
    return "packages" if item.kind == "packages" else f"{item.kind} {item.name}"


def counted(n: int, noun: str) -> str:
    """``1 file``, ``2 files``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def torch_text(version: str, *, cuda: str | None, hip: str | None) -> str:
    """``2.11.0+cu128 (cuda 12.8)``."""
    return f"{version} ({f'cuda {cuda}' if cuda else (f'hip {hip}' if hip else 'cpu')})"


def snapshot_summary_line(doc: Document) -> str:
    """``Python 3.11.7, 133 packages, torch 2.13.0+cpu (cpu), 1 repo, ...`` of a snapshot
    document (snapshots.document: what `envguard snapshot` writes)."""
    torch = doc["torch"]
    parts = [
        f"Python {doc['interpreter']['version']}",
        counted(sum(not p["shadowed"] for p in doc["packages"]), "package"),
        "torch "
        + (
            "-"
            if torch is None
            else torch_text(torch["version"], cuda=torch["cuda"], hip=torch["hip"])
        ),
        counted(len(doc["repos"]), "repo"),
        counted(len(doc["files"]), "file"),
        counted(len(doc["caches"]), "cache"),
    ]
    if doc["warnings"]:
        parts.append(counted(len(doc["warnings"]), "warning"))
    return ", ".join(parts)
