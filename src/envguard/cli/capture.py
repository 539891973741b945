"""`envguard snapshot`, `show` and `list`."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envguard.cli import OutputFormat, app, console, fail
from envguard.errors import EnvguardError

if TYPE_CHECKING:
    from envguard.models import Snapshot


@app.command()
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
        list[str] | None, typer.Option(help="KEY=VALUE of the run (repeatable).")
    ] = None,
    note: Annotated[str | None, typer.Option(help="A free-text note.")] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing snapshot.")] = False,
    via: Annotated[
        str | None,
        typer.Option(
            help="Run the probe through this command prefix ('ssh gpu01', 'docker exec c')."
        ),
    ] = None,
    hosts: Annotated[
        str | None,
        typer.Option(help="h1,h2,... or @hostfile: capture each through --via '... {host}'."),
    ] = None,
    jobs: Annotated[int, typer.Option(help="Hosts captured at once.")] = 16,
    timeout: Annotated[float, typer.Option(help="Seconds allowed per host.")] = 120.0,
) -> None:
    """Record the whole environment after a good run."""
    from datetime import datetime, timezone

    from envguard import store
    from envguard.capture.request import CaptureRequest, parse_metric, start_capture
    from envguard.probe import resolve_python
    from envguard.tools import split_command

    snap_name = (
        store.validate_name(name) if name else datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    )
    metrics = dict(parse_metric(m) for m in metric or [])
    prefix = split_command(via, option="--via") if via else ()
    if hosts is None and any("{host}" in t for t in prefix):
        fail("--via contains {host}: pass --hosts to say which hosts")
    if prefix:
        target_python: Path | str = python or "python3"
    else:
        target_python = resolve_python(python)
    request = CaptureRequest(
        python=target_python,
        python_label=f"--python {python}" if python and not prefix else None,
        name=snap_name,
        repos=tuple(repo or ()),
        files=tuple(file or ()),
        caches=tuple(("user", c) for c in cache or ()),
        include_cwd_repo=not prefix,
        metrics=metrics,
        note=note,
        command=tuple(["envguard", *sys.argv[1:]]),
        via=prefix,
        timeout=timeout if prefix else None,
    )
    if hosts is not None:
        _snapshot_hosts(request, hosts, out=out, force=force, jobs=jobs)
        return
    target = Path(out) if out and out != "-" else Path(store.SNAPSHOT_DIR) / f"{snap_name}.json"
    if out != "-" and "{host}" not in str(target):
        store.check_target(target, force=force)  # fail before the slow capture
    started = start_capture(request)
    # The probe runs while the models (pydantic) load: that import is most of our start-up.
    from envguard.capture.snapshot import finish_capture

    snap = finish_capture(started)
    text = store.dumps(snap)
    _print_warnings(snap)
    if out == "-":
        sys.stdout.write(text)
        return
    if "{host}" in str(target):
        from envguard.capture.hosts import check_host

        target = Path(str(target).replace("{host}", check_host(snap.host)))
    store.write_atomic(target, text, force=force)
    from envguard.render.table import snapshot_summary_line

    typer.echo(f"wrote {target}: {snapshot_summary_line(snap)}")


def _print_warnings(snap: "Snapshot", *, prefix: str = "") -> None:
    if not snap.warnings:
        return  # no rich import on the common path
    err = console(stderr=True)
    for warning in snap.warnings[:10]:
        err.print(f"warning: {prefix}{warning}", markup=False)
    if len(snap.warnings) > 10:
        err.print(f"warning: {prefix}... {len(snap.warnings) - 10} more, listed in the snapshot")


def _snapshot_hosts(
    request: Any, hosts_spec: str, *, out: str | None, force: bool, jobs: int
) -> None:
    from rich.progress import Progress

    from envguard import store
    from envguard.capture.hosts import capture_hosts, parse_hosts
    from envguard.errors import ActionError

    hosts = parse_hosts(hosts_spec)
    if out == "-":
        fail("--out - cannot hold many hosts; give a directory")
    folder = Path(out) if out else Path(store.SNAPSHOT_DIR) / request.name
    for host in hosts:
        store.check_target(folder / f"{host}.json", force=force)
    failed: list[tuple[str, str]] = []
    written = 0
    with Progress(console=console(stderr=True), transient=True) as progress:
        task = progress.add_task("capturing hosts", total=len(hosts))

        def done(result: Any) -> None:
            nonlocal written
            if result.snapshot is not None:
                store.write_atomic(
                    folder / f"{result.host}.json", store.dumps(result.snapshot), force=force
                )
                written += 1
            else:
                failed.append((result.host, result.error))
            progress.update(
                task, advance=1, description=f"hosts: {written} done, {len(failed)} failed"
            )

        capture_hosts(request, hosts, jobs=jobs, on_done=done)
    typer.echo(f"wrote {written} of {len(hosts)} hosts to {folder}/")
    for host, error in sorted(failed):
        sys.stderr.write(f"failed: {host}: {error}\n")
    if failed:
        raise ActionError(
            f"{len(failed)} of {len(hosts)} hosts failed",
            hint=f"compare the others with: envguard fleet {folder}",
        )


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
    # Newest first by when each run was recorded (a clone resets file times); unreadable last.
    rows.sort(key=lambda row: row[1].created.timestamp() if row[1] else float("-inf"), reverse=True)
    if format is OutputFormat.json:
        from envguard.render.json import snapshot_list

        sys.stdout.write(snapshot_list(rows))
        return
    from envguard.render.table import list_table

    list_table(rows, console())
