"""The envguard command line: parse, call the core, render, exit. No logic lives here."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from envguard import __version__
from envguard.errors import EnvguardError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from envguard.models import Snapshot


def _report(exc: EnvguardError) -> None:
    sys.stderr.write(f"error: {exc.message}\n")
    if exc.hint:
        sys.stderr.write(f"hint: {exc.hint}\n")


class _Group(TyperGroup):
    """Turns EnvguardError into `error: ...` on stderr and its exit code."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except EnvguardError as exc:
            _report(exc)
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    cls=_Group,
    help="Snapshot, diff and rebuild ML training environments.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    # Locals in tracebacks would print environment values, secrets included.
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"envguard {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Snapshot, diff and rebuild ML training environments."""


def console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def _fail(message: str) -> NoReturn:
    raise UsageError(message)


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


@app.command()
def snapshot(
    python: Annotated[
        str | None,
        typer.Option(
            help="Interpreter or venv to measure [default: $VIRTUAL_ENV, ./.venv, python3]."
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="Snapshot name [default: a UTC timestamp].")
    ] = None,
    out: Annotated[
        str | None, typer.Option("--out", "-o", help="Write here instead ('-': stdout).")
    ] = None,
    repo: Annotated[
        list[Path] | None, typer.Option(help="A git work tree to record (repeatable).")
    ] = None,
    file: Annotated[list[str] | None, typer.Option(help="A file to hash (repeatable).")] = None,
    cache: Annotated[
        list[str] | None, typer.Option(help="A cache directory to measure (repeatable).")
    ] = None,
    metric: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE of the run (repeatable).")
    ] = None,
    note: Annotated[str | None, typer.Option(help="A free-text note.")] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing snapshot.")] = False,
) -> None:
    """Record the whole environment after a good run."""
    from datetime import datetime, timezone

    from envguard import store
    from envguard.capture import CaptureRequest, capture_snapshot, parse_metric
    from envguard.probe import resolve_python

    snap_name = (
        store.validate_name(name) if name else datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    )
    metrics = dict(parse_metric(m) for m in metric or [])
    target = Path(out) if out and out != "-" else Path(store.SNAPSHOT_DIR) / f"{snap_name}.json"
    if out != "-":
        store.check_target(target, force=force)  # fail before the slow capture
    request = CaptureRequest(
        python=resolve_python(python),
        python_label=f"--python {python}" if python else None,
        name=snap_name,
        repos=tuple(repo or ()),
        files=tuple(file or ()),
        caches=tuple(("user", c) for c in cache or ()),
        metrics=metrics,
        note=note,
        command=tuple(["envguard", *sys.argv[1:]]),
    )
    snap = capture_snapshot(request)
    text = store.dumps(snap)
    err = console(stderr=True)
    for warning in snap.warnings[:10]:
        err.print(f"warning: {warning}", markup=False)
    if len(snap.warnings) > 10:
        err.print(f"warning: ... {len(snap.warnings) - 10} more, listed in the snapshot")
    if out == "-":
        sys.stdout.write(text)
        return
    store.write_atomic(target, text, force=force)
    from envguard.render.table import snapshot_summary_line

    typer.echo(f"wrote {target}: {snapshot_summary_line(snap)}")


@app.command()
def show(
    snapshot_ref: Annotated[str, typer.Argument(metavar="SNAPSHOT", help="Path or name.")],
    format: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.table,
) -> None:
    """Summarise one snapshot."""
    from envguard import store

    snap = store.load(snapshot_ref)
    if format is OutputFormat.json:
        sys.stdout.write(store.dumps(snap))
        return
    from envguard.render.table import show_snapshot

    show_snapshot(snap, console())


@app.command("list")
def list_(
    format: Annotated[OutputFormat, typer.Option("--format")] = OutputFormat.table,
) -> None:
    """Snapshots in snapshots/, newest first."""
    from envguard import store

    rows: list[tuple[Path, Snapshot | None, str | None]] = []
    for path in store.list_snapshots():
        try:
            rows.append((path, store.load(path), None))
        except EnvguardError as exc:
            rows.append((path, None, exc.message))
    if format is OutputFormat.json:
        from envguard.render.json import snapshot_list

        sys.stdout.write(snapshot_list(rows))
        return
    from envguard.render.table import list_table

    list_table(rows, console())


def main() -> None:
    """Console entry point."""
    app(prog_name="envguard")
