"""Rich output for people: snapshot summaries, snapshot lists, drift tables."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from envguard.units import human_size

if TYPE_CHECKING:
    from envguard.compare.models import Drift, FleetReport
    from envguard.recovery.plan import Plan
    from envguard.snapshots.history import Entry
    from envguard.snapshots.models import CompileKey, Fit, MetricValue, Snapshot
    from envguard.snapshots.store import Listed


def _row(table: Table, *cells: str | Text) -> None:
    """Add a row whose strings are shown as written: snapshot text is never rich markup."""
    from envguard.render.text import printable

    table.add_row(*(Text(printable(c)) if isinstance(c, str) else c for c in cells))


# Past this many rows rich's layout (it measures every cell to wrap it) dominates the
# command (docs/benchmarks.md). Larger tables are written as plain aligned columns, every
# row kept, nothing wrapped (a person does not read 300 rows as a boxed table anyway).
RICH_ROWS = 300


def _print_rows(
    console: Console,
    headers: tuple[str, ...],
    rows: Sequence[tuple[str, ...]],
    *,
    title: str | None = None,
    styles: dict[int, dict[str, str]] | None = None,
    whole: tuple[int, ...] = (),
) -> None:
    """A table of ``rows``: rich's when small (``styles`` maps a column to the style of
    each value; the ``whole`` columns, names, are never cut), plain aligned columns when
    large."""
    if len(rows) <= RICH_ROWS:
        table = Table(*headers, title=title, title_justify="left")
        for i in whole:
            table.columns[i].no_wrap = True
            table.columns[i].min_width = min(48, max((len(r[i]) for r in rows), default=0))
        look = styles or {}
        for row in rows:
            _row(
                table,
                *(
                    Text(c, style=look[i][c]) if i in look and c in look[i] else c
                    for i, c in enumerate(row)
                ),
            )
        console.print(table)
        return
    from envguard.render.text import printable

    # Words of envguard's own (critical, packages, upgraded) need no escaping: skip them.
    cells = [[c if c.isidentifier() else printable(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()

    out = [title] if title else []
    out += [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(row) for row in cells]
    # Written past rich: its wrapping of one 100,000-line string alone costs seconds.
    console.file.write("\n".join(out) + "\n")


def torch_label(snap: Snapshot) -> str:
    """``2.11.0+cu128 (cuda 12.8)``, or ``-`` without torch."""
    from envguard.render.text import torch_text

    t = snap.torch
    return "-" if t is None else torch_text(t.version, cuda=t.cuda, hip=t.hip)


def metrics_label(metrics: dict[str, MetricValue]) -> str:
    from envguard.redact import redact_metrics

    return ", ".join(f"{k}={v}" for k, v in redact_metrics(metrics).items()) or "-"


def compile_label(key: CompileKey) -> str:
    """``C++ g++ (gcc 12.2.0), triton 3.8.0 key ba4da488a3fd, compute capability 9.0``:
    what torch.compile's cache keys hold beyond torch, Python and the variables."""
    parts = []
    if key.cxx is not None:
        parts.append(f"C++ {key.cxx.name} ({key.cxx.version or key.cxx.error or 'no version'})")
    if key.triton is not None:
        digest = key.triton.digest[:12] if key.triton.digest else "not computed"
        parts.append(f"triton {key.triton.version} key {digest}")
    if key.capabilities:
        parts.append(f"compute capability {', '.join(sorted(set(key.capabilities)))}")
    return ", ".join(parts) or "-"


def show_snapshot(snap: Snapshot, console: Console) -> None:
    """The rich summary printed by `envguard show`."""
    i = snap.interpreter
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    _row(
        head,
        "snapshot",
        f"{snap.name}  ({snap.created.isoformat(timespec='seconds')}, {snap.user}@{snap.host})",
    )
    _row(head, "interpreter", f"{i.implementation} {i.version} {i.machine} {i.libc or ''}".rstrip())
    _row(head, "", i.executable + ("  (venv)" if i.is_venv else ""))
    _row(head, "packages", str(sum(not p.shadowed for p in snap.packages)))
    _row(head, "torch", torch_label(snap))
    if snap.torch is not None:
        from envguard.compare.sections.torch import STACK_FIELDS

        stack = [f"{k} {v}" for k in STACK_FIELDS if (v := getattr(snap.torch, k))]
        _row(head, "", ", ".join(stack) or "no cudnn/nccl/triton distributions")
    a = snap.accelerator
    accel = (
        f"driver {a.driver}, {a.count} x {a.gpus[0]}"
        if a.gpus
        else (f"driver {a.driver}" if a.driver else "none")
    )
    _row(head, "accelerator", accel + (f", nvcc {a.nvcc}" if a.nvcc else ""))
    if snap.host_layer is not None:
        from envguard.compare.sections.host_layer import host_label

        _row(head, "host", host_label(snap))
    if snap.compile is not None:
        _row(head, "compile", compile_label(snap.compile))
    _row(head, "metrics", metrics_label(snap.metrics))
    if snap.env_at_start:  # the API inside a script: what it changed after it started
        _row(head, "env changed in process", ", ".join(snap.env_at_start))
    if snap.note:
        from envguard.redact import redact_text

        _row(head, "note", redact_text(snap.note))
    console.print(head)
    if snap.repos:
        table = Table("repo", "head", "branch", "state", title="repos", title_justify="left")
        for r in snap.repos:
            state = "dirty" if r.dirty else "clean"
            if r.untracked:
                state += f", {r.untracked} untracked"
            _row(table, r.path, (r.head or "-")[:12], r.branch or "(detached)", state)
        console.print(table)
    if snap.files:
        table = Table("file", "sha256", "size", title="files", title_justify="left")
        for f in snap.files:
            _row(table, f.path, (f.sha256 or "-")[:16], human_size(f.size or 0))
        console.print(table)
    if snap.caches:
        table = Table(
            "cache", "path", "state", "size", "files", title="caches", title_justify="left"
        )
        for c in snap.caches:
            state = "missing" if not c.exists else ("unreadable" if not c.readable else "present")
            _row(table, c.kind, c.path, state, human_size(c.bytes), str(c.files))
        console.print(table)
    from envguard.render.text import printable

    for warning in snap.warnings:
        console.print(f"warning: {printable(warning)}", markup=False)


def _age(created: datetime) -> str:
    try:
        return created.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, ValueError):  # year 1 in another zone: no UTC time to show
        return created.isoformat()


def log_table(entries: list[Entry], console: Console, *, metric: str | None = None) -> None:
    """`envguard log`: one row per snapshot, oldest first; with ``metric``, its value and a
    bar per run, so a fall shows at a glance."""
    if not entries:
        console.print("no snapshots in snapshots/ (run `envguard snapshot` after a good run)")
        return
    from envguard.snapshots.history import metric_value, sparkline

    bars = sparkline([metric_value(e, metric) for e in entries]) if metric else []
    rows = []
    for i, e in enumerate(entries):
        if e.error is not None:
            rows.append(("-", e.path.stem, "-", "-", f"unreadable: {e.error}"))
            continue
        created = _age(e.created) if e.created else "-"
        if metric:
            value = e.metrics.get(metric)
            shown = f"{bars[i]} {value}" if value is not None else "  -"
        else:
            shown = metrics_label(e.metrics)
        rows.append((created, e.name, e.torch or "-", shown, e.change))
    headers = ("created", "name", "torch", metric or "metrics", "change since the previous")
    _print_rows(console, headers, rows, whole=(1,))


def list_table(rows: list[Listed], console: Console) -> None:
    """The table printed by `envguard list`."""
    if not rows:
        console.print("no snapshots in snapshots/ (run `envguard snapshot` after a good run)")
        return
    table = Table("name", "created", "torch", "packages", "metrics")
    for row in rows:
        path, snap, error = row.path, row.snapshot, row.error
        if snap is None:
            _row(table, path.stem, "-", f"unreadable: {error}", "-", "-")
            continue
        _row(
            table,
            snap.name,
            _age(snap.created),
            torch_label(snap),
            str(sum(not p.shadowed for p in snap.packages)),
            metrics_label(snap.metrics),
        )
    console.print(table)


_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def drift_table(drift: Drift, console: Console, *, expand: bool = False) -> None:
    """What `envguard diff` prints: the verdict, then the changes grouped by severity and
    section; a package an install pulled in is folded into that install's row (critical
    ones never are) unless ``expand``."""
    from envguard.compare.severity import iter_sections
    from envguard.render.text import collapsed, metrics_footer, printable, summary

    if drift.verdict:
        for line in drift.verdict:
            console.print(printable(line), markup=False, highlight=False, soft_wrap=True)
        console.print()
    if drift.changes:
        shown, folded = collapsed(drift, expand=expand)
        rows = [
            (level.value, c.section, c.kind, shown.get(id(c), c.message))
            for level, changes in iter_sections(drift)
            for c in changes
            if id(c) not in folded
        ]
        _print_rows(console, ("severity", "section", "change", "what"), rows, styles={0: _STYLE})
    if expand and drift.groups:
        from envguard.render.text import group_tree

        console.print("what each install pulled in:", markup=False)
        for line in group_tree(drift):
            console.print(printable(line), markup=False, highlight=False, soft_wrap=True)
    console.print(printable(summary(drift, expand=expand)), markup=False)
    footer = metrics_footer(drift)
    if footer and not drift.verdict:  # the verdict already ends with the last good run
        console.print(printable(footer), markup=False)


def plan_table(plan: Plan, console: Console) -> None:
    """The rebuild plan as `envguard rebuild` prints it without --execute."""
    from envguard.render.shell import step_command

    mode = "in place" if plan.in_place else f"fresh, built in {plan.build} then swapped in"
    from envguard.render.text import printable

    console.print(
        printable(
            f"rebuild plan for {plan.venv} from snapshot {plan.snapshot}: {plan.packages}"
            f" packages, Python {plan.python} ({mode})"
        ),
        markup=False,
    )
    if plan.torch:
        console.print(printable(f"torch build: {plan.torch}"), markup=False)
    table = Table("#", "step", "command")
    table.columns[2].overflow = "fold"  # a command is shown whole, wrapped, never cut
    for i, step in enumerate(plan.steps, 1):
        _row(
            table,
            str(i),
            Text(step.purpose, overflow="fold"),
            Text(step_command(plan, step), overflow="fold"),
        )
    console.print(table)
    for f in plan.files:
        count = sum(1 for line in f.content.splitlines() if line and not line.startswith("#"))
        console.print(f"{f.path}: {count} pins", markup=False)
    for skipped in plan.skipped:
        console.print(f"skipped: {printable(skipped)}", markup=False)
    for warning in plan.warnings:
        console.print(f"warning: {printable(warning)}", markup=False)
    console.print("nothing was changed; pass --execute to run it", markup=False)


def fleet_table(report: FleetReport, console: Console) -> None:
    """The N-way comparison printed by `envguard fleet`: one screen at any size (failed
    hosts, groups and items past a few are counted, not listed; --format json lists all)."""
    from envguard.render.text import fleet_digest, host_list, printable

    if report.agree:
        console.print(f"all {len(report.hosts)} hosts agree", markup=False)
        return
    digest = fleet_digest(report)
    if report.failed:
        failed = [(f.host, f.reason) for f in report.failed[:_SHOWN]]
        if len(report.failed) > _SHOWN:
            failed.append(("", f"(+{len(report.failed) - _SHOWN} more)"))
        _print_rows(console, ("host", "why"), failed, title="failed hosts")
    if report.groups:
        groups = Table("group", "hosts", "count", title="environments", title_justify="left")
        for g in report.groups[:_SHOWN]:
            _row(groups, g.fingerprint, host_list(g.hosts), str(len(g.hosts)))
        if len(report.groups) > _SHOWN:
            _row(groups, "", f"(+{len(report.groups) - _SHOWN} more groups)", "")
        console.print(groups)
    if digest.rows:
        odd = {3: {"odd one out": "bold red"}}
        # An item's name once, on its first value's row.
        rows = [
            ("" if i and row[0] == digest.rows[i - 1][0] else row[0], *row[1:])
            for i, row in enumerate(digest.rows)
        ]
        _print_rows(console, ("item", "value", "hosts", ""), rows, title="what differs", styles=odd)
    console.print(printable(digest.summary), markup=False)


# Rows of one kind listed before the rest are counted.
_SHOWN = 10


def fit_table(
    fit: Fit,
    console: Console,
    *,
    warnings: Sequence[str] = (),
    no_kernel: Sequence[str] = (),
) -> None:
    """One line per extension that cannot load, then one per extension with no kernel for
    this node's GPU (``no_kernel``), then the count; the warnings after."""
    from envguard.compare.sections.fit import cannot_load

    for unfit in fit.broken:
        owner = f" [{unfit.dist}]" if unfit.dist else ""
        console.print(Text(cannot_load(unfit) + owner), soft_wrap=True)
    for message in no_kernel:
        console.print(Text(message), soft_wrap=True)
    noun = "extension" if fit.checked == 1 else "extensions"
    if fit.broken:
        summary = f"{len(fit.broken)} of {fit.checked} {noun} that use torch or CUDA cannot load"
    else:
        summary = f"{fit.checked} {noun} that use torch or CUDA: all load"
    if no_kernel:
        summary += f"; {len(no_kernel)} with no kernel for this node's GPU"
    console.print(Text(summary))
    for warning in warnings[:10]:
        console.print(Text(f"warning: {warning}"), soft_wrap=True)
