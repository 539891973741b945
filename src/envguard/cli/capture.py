"""`envguard snapshot`, `show` and `list`."""

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envguard.cli.program import (
    AFTER_A_GOOD_RUN,
    FILES,
    Deep,
    OutputFormat,
    app,
    console,
    fail,
    measure,
)
from envguard.terminal import data_out

if TYPE_CHECKING:
    from envguard.snapshots.hosts import HostResult


@app.command(rich_help_panel=AFTER_A_GOOD_RUN)
def snapshot(
    python: Annotated[
        str | None,
        typer.Option(
            help="Interpreter or venv to measure [default: $VIRTUAL_ENV, ./.venv, python3;"
            " with --via: python3 on the far side]."
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="Snapshot name [default: a UTC timestamp].")
    ] = None,
    out: Annotated[
        str | None,
        typer.Option("--out", "-o", help="Write here ('-': stdout; {host}: the host name)."),
    ] = None,
    repo: Annotated[
        list[Path] | None, typer.Option(help="A git work tree to record (repeatable).")
    ] = None,
    file: Annotated[list[str] | None, typer.Option(help="A file to hash (repeatable).")] = None,
    cache: Annotated[
        list[str] | None, typer.Option(help="A cache directory to measure (repeatable).")
    ] = None,
    metric: Annotated[
        list[str] | None, typer.Option(help="NAME=VALUE of the run (repeatable).")
    ] = None,
    note: Annotated[str | None, typer.Option(help="A free-text note.")] = None,
    pid: Annotated[
        int | None,
        typer.Option(help="A running trainer: record the GPU libraries it has mapped."),
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing snapshot.")] = False,
    via: Annotated[
        str | None,
        typer.Option(
            help="Run the probe through this command prefix ('ssh gpu01', 'docker exec -i c')."
        ),
    ] = None,
    hosts: Annotated[
        str | None,
        typer.Option(help="h1,h2,... or @hostfile: capture each through --via '... {host}'."),
    ] = None,
    jobs: Annotated[int, typer.Option(help="Hosts captured at once.")] = 16,
    timeout: Annotated[float, typer.Option(help="Seconds allowed per host.")] = 120.0,
    root: Annotated[
        str | None,
        typer.Option(help="Also record --file paths relative to this folder (work trees are)."),
    ] = None,
    keep_files: Annotated[
        bool, typer.Option(help="Keep the --file contents in the store, for restore.")
    ] = False,
    keep_cache: Annotated[
        bool, typer.Option(help="Keep the compile caches (gzip tarballs) in the store.")
    ] = False,
    store: Annotated[
        str | None, typer.Option(help="The content store [default: .store beside the snapshot].")
    ] = None,
    deep: Deep = False,
) -> None:
    """Record the whole environment after a good run."""
    from envguard import api
    from envguard.snapshots.request import parse_metric

    metrics = dict(parse_metric(m) for m in metric or [])
    command = ("envguard", *sys.argv[1:])
    where = measure(python=python, via=via, timeout=timeout, root=root, deep=deep, pid=pid)
    keeping = keep_files or keep_cache
    if keeping and hosts is not None:
        fail("--keep-files and --keep-cache take one host at a time (drop --hosts)")
    if hosts is not None:
        if out == "-":
            fail("--out - cannot hold many hosts; give a directory")
        if via is None:
            fail("--hosts needs {host} in --via, e.g. --via 'ssh {host}'")
        progress = _HostProgress()
        with progress:
            results = api.snapshot_hosts(
                hosts,
                measure=where,
                folder=out,
                name=name,
                repos=repo or (),
                files=file or (),
                caches=cache or (),
                metrics=metrics,
                note=note,
                jobs=jobs,
                force=force,
                command=command,
                on_done=progress.advance,
            )
        _report_hosts(results, out=out)
        return
    from envguard.recording import record

    record(
        where,
        name=name,
        out=out,
        force=force,
        command=command,
        repos=repo or (),
        files=file or (),
        caches=cache or (),
        metrics=metrics,
        note=note,
        keep_files=keep_files,
        keep_cache=keep_cache,
        store=store,
    )


class _HostProgress:
    """A transient progress bar on stderr: hosts done and failed so far."""

    def __init__(self) -> None:
        from rich.progress import Progress

        self.progress = Progress(console=console(stderr=True), transient=True)
        self.task = self.progress.add_task("capturing hosts", total=None)
        self.done = self.failed = 0

    def __enter__(self) -> None:
        self.progress.start()

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def advance(self, result: "HostResult") -> None:
        if result.snapshot is not None:
            self.done += 1
        else:
            self.failed += 1
        self.progress.update(
            self.task, description=f"hosts: {self.done} done, {self.failed} failed"
        )


def _report_hosts(results: "list[HostResult]", *, out: str | None) -> None:
    from envguard.errors import ActionError
    from envguard.redact import redact_text
    from envguard.render.text import printable

    written = [r for r in results if r.path is not None]
    folder = written[0].path.parent if written and written[0].path else None
    if written:
        typer.echo(f"wrote {len(written)} of {len(results)} hosts to {folder}/")
    failed = sorted((r.host, r.error or "failed") for r in results if r.snapshot is None)
    for host, error in failed:
        said = error if error.startswith(f"{host}: ") else f"{host}: {error}"  # host once
        sys.stderr.write(f"failed: {printable(redact_text(said))}\n")
    if failed:
        raise ActionError(
            f"{len(failed)} of {len(results)} hosts failed"
            if written
            else f"every host failed ({len(failed)}); nothing was written",
            hint=f"compare the others with: envguard fleet {folder}"
            if written
            else "try one host by hand: envguard snapshot --via PREFIX --out -",
        )


@app.command(rich_help_panel=AFTER_A_GOOD_RUN)
def show(
    snapshot_ref: Annotated[
        str | None,
        typer.Argument(metavar="[SNAPSHOT]", help="Path or name [default: newest in snapshots/]."),
    ] = None,
    format: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.table,
) -> None:
    """Summarise one snapshot."""
    from envguard import api

    snap = api.load(snapshot_ref if snapshot_ref is not None else api.newest())
    if format is OutputFormat.json:
        from envguard.snapshots.store import dumps

        data_out().write(dumps(snap))
        return
    from envguard.render.table import show_snapshot

    show_snapshot(snap, console())


class LogFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    json = "json"


@app.command(rich_help_panel=AFTER_A_GOOD_RUN)
def log(
    metric: Annotated[
        str | None, typer.Option(help="Follow this metric: its value and a bar per run.")
    ] = None,
    format: Annotated[LogFormat, typer.Option("--format")] = LogFormat.table,
) -> None:
    """Snapshots in time order, with metrics and what changed.

    Each run's metrics (--metric: a bar per run) and what changed since the one before.
    """
    from envguard import api

    entries = api.log()
    if format is LogFormat.json:
        from envguard.render.json import log_json

        data_out().write(log_json(entries))
    elif format is LogFormat.markdown:
        from envguard.render.markdown import log_markdown

        data_out().write(log_markdown(entries, metric=metric))
    else:
        from envguard.render.table import log_table

        log_table(entries, console(), metric=metric)


@app.command("list", rich_help_panel=AFTER_A_GOOD_RUN)
def list_(
    format: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.table,
) -> None:
    """Snapshots in snapshots/, newest first."""
    from envguard import api

    rows = api.list_snapshots()
    if format is OutputFormat.json:
        from envguard.render.json import snapshot_list

        data_out().write(snapshot_list(rows))
        return
    from envguard.render.table import list_table

    list_table(rows, console())


class SchemaKind(str, Enum):
    snapshot = "snapshot"
    drift = "drift"
    fleet = "fleet"
    plan = "plan"
    list = "list"
    log = "log"
    restore = "restore"
    bisect = "bisect"
    guard = "guard"
    history = "history"
    undo = "undo"
    protect = "protect"
    fit = "fit"


@app.command(rich_help_panel=FILES)
def schema(
    kind: Annotated[
        SchemaKind,
        typer.Argument(
            metavar="KIND",
            help="Which document: " + ", ".join(k.value for k in SchemaKind) + ".",
            show_choices=False,
        ),
    ],
) -> None:
    """Print the JSON Schema of a snapshot or of a JSON output.

    A snapshot file, or the document a command prints with --format json.
    """
    from envguard.schemas import schema_text

    data_out().write(schema_text(kind.value))
