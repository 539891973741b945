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


class DriftFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    github = "github"


if TYPE_CHECKING:
    from envguard.models import Drift
    from envguard.policy import Policy


def _emit_drift(drift: Drift, fmt: DriftFormat) -> None:
    import os

    if fmt is DriftFormat.json:
        from envguard.render.json import drift_json

        sys.stdout.write(drift_json(drift))
    elif fmt is DriftFormat.markdown:
        from envguard.render.markdown import drift_markdown

        sys.stdout.write(drift_markdown(drift))
    elif fmt is DriftFormat.github:
        from envguard.render.github import drift_github
        from envguard.render.markdown import drift_markdown
        from envguard.render.text import summary

        sys.stdout.write(drift_github(drift))
        sys.stdout.write(summary(drift) + "\n")
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if step_summary:
            with open(step_summary, "a", encoding="utf-8") as fh:
                fh.write(drift_markdown(drift) + "\n")
    else:
        from envguard.render.table import drift_table

        drift_table(drift, console())


def _live_snapshot(expected: Snapshot, python: str | None, via: str | None = None) -> Snapshot:
    """Measure the live environment the way ``expected`` was measured."""
    from envguard.capture import capture_snapshot, request_like
    from envguard.probe import resolve_python

    if via:
        from envguard.capture.hosts import split_via

        remote = python or expected.interpreter.executable
        return capture_snapshot(request_like(expected, python=remote, via=split_via(via)))
    if expected.via:
        # Never run a command a snapshot file names: it may come from a pull request.
        raise UsageError(
            f"{expected.name} was captured --via {expected.via!r}",
            hint="pass --via yourself to measure that environment again",
        )
    if python:
        target = resolve_python(python)
    else:
        target = Path(expected.interpreter.executable)
        if not target.exists():
            raise UsageError(
                f"{target}: the snapshot's interpreter no longer exists",
                hint="pass --python PATH to compare another interpreter or venv",
            )
    label = f"--python {python}" if python else f"the snapshot's interpreter {target}"
    return capture_snapshot(request_like(expected, python=target, python_label=label))


def _policy_and_threshold(fail_on: str | None, only: list[str] | None = None) -> tuple[Policy, Any]:
    from dataclasses import replace

    from envguard.policy import SECTIONS, load_policy, parse_fail_on

    policy = load_policy()
    if only:
        unknown = [s for s in only if s not in SECTIONS]
        if unknown:
            _fail(f"--only {unknown[0]}: not a section ({', '.join(SECTIONS)})")
        policy = replace(policy, ignore_sections=tuple(s for s in SECTIONS if s not in only))
    threshold = parse_fail_on(fail_on) if fail_on is not None else policy.fail_on
    return policy, threshold


def _compare(
    snapshot_ref: str | None,
    against: str | None,
    python: str | None,
    fail_on: str | None,
    fmt: DriftFormat,
    only: list[str] | None = None,
    via: str | None = None,
) -> None:
    from envguard import store
    from envguard.diff import diff as compute

    policy, threshold = _policy_and_threshold(fail_on, only)
    expected = store.load(snapshot_ref if snapshot_ref else store.newest())
    actual = store.load(against) if against else _live_snapshot(expected, python, via)
    drift = compute(expected, actual, policy)
    _emit_drift(drift, fmt)
    raise typer.Exit(1 if drift.reaches(threshold) else 0)


FailOn = Annotated[
    str | None,
    typer.Option(
        "--fail-on", help="critical|warning|info|never [default: warning, or [tool.envguard]]."
    ),
]


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
    from envguard.capture import CaptureRequest, capture_snapshot, parse_metric
    from envguard.capture.hosts import split_via
    from envguard.probe import resolve_python

    snap_name = (
        store.validate_name(name) if name else datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    )
    metrics = dict(parse_metric(m) for m in metric or [])
    prefix = split_via(via) if via else ()
    if hosts is None and any("{host}" in t for t in prefix):
        _fail("--via contains {host}: pass --hosts to say which hosts")
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
    snap = capture_snapshot(request)
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


def _print_warnings(snap: Snapshot, *, prefix: str = "") -> None:
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
        _fail("--out - cannot hold many hosts; give a directory")
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
    if format is OutputFormat.json:
        from envguard.render.json import snapshot_list

        sys.stdout.write(snapshot_list(rows))
        return
    from envguard.render.table import list_table

    list_table(rows, console())


@app.command()
def diff(
    snapshot_ref: Annotated[
        str | None,
        typer.Argument(metavar="[SNAPSHOT]", help="Path or name [default: newest in snapshots/]."),
    ] = None,
    against: Annotated[
        str | None, typer.Option(help="Compare with this snapshot instead of the live environment.")
    ] = None,
    python: Annotated[
        str | None, typer.Option(help="Measure this interpreter or venv [default: the snapshot's].")
    ] = None,
    format: Annotated[DriftFormat, typer.Option("--format")] = DriftFormat.table,
    fail_on: FailOn = None,
    only: Annotated[
        list[str] | None, typer.Option(help="Compare only this section (repeatable).")
    ] = None,
    via: Annotated[
        str | None, typer.Option(help="Measure through this command prefix ('ssh gpu01').")
    ] = None,
) -> None:
    """What drifted since the known-good snapshot, worst first. Exit 1 on drift."""
    _compare(snapshot_ref, against, python, fail_on, format, only, via)


@app.command()
def check(
    snapshot_ref: Annotated[str, typer.Argument(metavar="SNAPSHOT", help="Path or name.")],
    lock: Annotated[
        Path | None,
        typer.Option(
            help="Compare the snapshot's pins with uv.lock, pylock.toml or requirements.txt."
        ),
    ] = None,
    against: Annotated[str | None, typer.Option(help="Compare with this snapshot.")] = None,
    python: Annotated[str | None, typer.Option(help="Measure this interpreter or venv.")] = None,
    format: Annotated[
        DriftFormat | None,
        typer.Option("--format", help="[default: github under GitHub Actions, else table]"),
    ] = None,
    fail_on: FailOn = None,
) -> None:
    """The CI gate: fail when the environment or a lockfile drifted from the snapshot."""
    import os

    fmt = format or (
        DriftFormat.github if os.environ.get("GITHUB_ACTIONS") == "true" else DriftFormat.table
    )
    if lock is None:
        _compare(snapshot_ref, against, python, fail_on, fmt)
        return
    from envguard import store
    from envguard.lockfiles import lock_drift, read_lock

    policy, threshold = _policy_and_threshold(fail_on)
    expected = store.load(snapshot_ref)
    drift = lock_drift(expected, read_lock(lock, expected), policy=policy, lock=str(lock))
    _emit_drift(drift, fmt)
    raise typer.Exit(1 if drift.reaches(threshold) else 0)


class PlanFormat(str, Enum):
    table = "table"
    json = "json"
    shell = "shell"


class ExportFormat(str, Enum):
    requirements = "requirements"
    pylock = "pylock"


def _plan_options(
    snapshot_ref: str,
    venv: Path,
    *,
    in_place: bool,
    index_url: str | None,
    extra_index_url: list[str] | None,
    find_links: list[str] | None,
    offline: bool,
    no_index: bool,
    skip_editables: bool,
    torch_index: str | None,
    base_python: str | None,
    check_paths: bool,
) -> Any:
    from envguard.plan import DEFAULT_TORCH_INDEX, PlanOptions
    from envguard.rebuild import build_paths
    from envguard.tools import find_uv

    venv = venv.expanduser().absolute()
    build, workdir = build_paths(venv)
    return PlanOptions(
        venv=venv,
        snapshot_ref=snapshot_ref,
        uv=find_uv(),
        envguard=(sys.executable, "-m", "envguard"),
        in_place=in_place,
        build=None if in_place else build,
        workdir=workdir,
        index_url=index_url,
        extra_index_urls=tuple(extra_index_url or ()),
        find_links=tuple(
            str(Path(f).absolute()) if "://" not in f else f for f in find_links or ()
        ),
        offline=offline,
        no_index=no_index,
        skip_editables=skip_editables,
        torch_index=torch_index or DEFAULT_TORCH_INDEX,
        base_python=base_python,
        check_paths=check_paths,
    )


@app.command()
def rebuild(
    snapshot_ref: Annotated[
        str | None, typer.Argument(metavar="[SNAPSHOT]", help="[default: newest in snapshots/]")
    ] = None,
    venv: Annotated[Path, typer.Option(help="The venv to recreate.")] = Path(".venv"),
    execute: Annotated[bool, typer.Option(help="Run the plan (default: only print it).")] = False,
    in_place: Annotated[
        bool, typer.Option(help="uv pip sync straight into the venv (fastest, not atomic).")
    ] = False,
    no_backup: Annotated[
        bool, typer.Option(help="Delete the old venv after a successful swap.")
    ] = False,
    format: Annotated[PlanFormat, typer.Option("--format")] = PlanFormat.table,
    index_url: Annotated[str | None, typer.Option(help="Passed to uv.")] = None,
    extra_index_url: Annotated[list[str] | None, typer.Option(help="Passed to uv.")] = None,
    find_links: Annotated[list[str] | None, typer.Option(help="Passed to uv.")] = None,
    offline: Annotated[bool, typer.Option(help="Passed to uv.")] = False,
    no_index: Annotated[bool, typer.Option(help="Passed to uv.")] = False,
    skip_editables: Annotated[
        bool, typer.Option(help="Leave out editable installs whose path is gone.")
    ] = False,
    torch_index: Annotated[
        str | None, typer.Option(help="Base of the PyTorch variant indexes (a mirror).")
    ] = None,
    base_python: Annotated[
        str | None, typer.Option(help="Interpreter for the new venv [default: snapshot's X.Y.Z].")
    ] = None,
    then: Annotated[
        str | None, typer.Option(help="After a successful swap, run CMD with the new venv active.")
    ] = None,
) -> None:
    """Recreate the snapshot's environment with uv: plan, build, verify, swap."""
    from envguard import store
    from envguard.plan import plan as make_plan

    ref = snapshot_ref or str(store.newest())
    snap = store.load(ref)
    options = _plan_options(
        str(store.resolve(ref)),
        venv,
        in_place=in_place,
        index_url=index_url,
        extra_index_url=extra_index_url,
        find_links=find_links,
        offline=offline,
        no_index=no_index,
        skip_editables=skip_editables,
        torch_index=torch_index,
        base_python=base_python,
        check_paths=True,
    )
    if in_place and not options.venv.is_dir():
        _fail(f"--venv {venv}: no such venv to sync in place")
    the_plan = make_plan(snap, options)
    if not execute:
        if format is PlanFormat.json:
            sys.stdout.write(the_plan.model_dump_json(indent=2) + "\n")
        elif format is PlanFormat.shell:
            from envguard.plan import shell_script

            sys.stdout.write(shell_script(the_plan))
        else:
            from envguard.render.table import plan_table

            plan_table(the_plan, console())
        return
    _execute_rebuild(the_plan, snap, no_backup=no_backup, then=then)


def _execute_rebuild(the_plan: Any, snap: Snapshot, *, no_backup: bool, then: str | None) -> None:
    import os
    import shlex
    import subprocess

    from envguard.capture import capture_snapshot, request_like
    from envguard.diff import diff as compute
    from envguard.plan import restore_hints
    from envguard.policy import Policy
    from envguard.rebuild import execute, remove_stale

    err = console(stderr=True)
    venv = Path(the_plan.venv)
    for stale in remove_stale(venv):
        err.print(f"removed {stale} left by an interrupted rebuild", markup=False)
    skipped = frozenset(s.split(" ", 1)[0] for s in the_plan.skipped)
    with err.status("rebuilding") as status:
        outcome = execute(
            the_plan,
            snap,
            no_backup=no_backup,
            ignore=skipped,
            status=lambda text: status.update(text),
            on_line=lambda line: err.print(f"  {line}", markup=False, style="dim"),
        )
    out = console()
    out.print(
        f"rebuilt {venv} from {the_plan.snapshot}: {the_plan.packages} packages,"
        " verified against the snapshot",
        markup=False,
    )
    if outcome.backup is not None:
        out.print(f"the previous venv is kept at {outcome.backup}", markup=False)
    for note in outcome.notes:
        out.print(note, markup=False)
    policy = Policy(ignore_sections=("interpreter", "torch", "packages", "accelerator", "env"))
    rest = compute(
        snap, capture_snapshot(request_like(snap, python=venv / "bin" / "python")), policy
    )
    for hint in restore_hints(rest.changes, snap):
        out.print(f"not restored: {hint}", markup=False)
    if then:
        env = {
            **os.environ,
            "VIRTUAL_ENV": str(venv),
            "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        argv = shlex.split(then)
        out.print(f"running: {shlex.join(argv)}", markup=False)
        try:
            code = subprocess.run(argv, env=env, check=False).returncode
        except OSError as exc:
            _fail(f"--then {then!r}: cannot run it ({exc.strerror})")
        if code != 0:
            from envguard.errors import ActionError

            raise ActionError(f"--then command exited {code} (the rebuilt venv is in place)")


@app.command()
def export(
    snapshot_ref: Annotated[str, typer.Argument(metavar="SNAPSHOT", help="Path or name.")],
    format: Annotated[ExportFormat, typer.Option("--format")] = ExportFormat.requirements,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="[default: stdout]")] = None,
    index_url: Annotated[str | None, typer.Option(help="Passed to uv (pylock).")] = None,
    extra_index_url: Annotated[list[str] | None, typer.Option(help="Passed to uv.")] = None,
    find_links: Annotated[list[str] | None, typer.Option(help="Passed to uv.")] = None,
    offline: Annotated[bool, typer.Option(help="Passed to uv.")] = False,
    no_index: Annotated[bool, typer.Option(help="Passed to uv.")] = False,
    skip_editables: Annotated[bool, typer.Option(help="Leave out editable installs.")] = False,
    torch_index: Annotated[str | None, typer.Option(help="PyTorch index base.")] = None,
    force: Annotated[bool, typer.Option(help="Overwrite --output.")] = False,
) -> None:
    """Write the snapshot as a pinned requirements.txt or a PEP 751 pylock.toml."""
    from envguard import store
    from envguard.export import pylock_text, requirements_export

    snap = store.load(snapshot_ref)
    options = _plan_options(
        snapshot_ref,
        Path(".venv"),
        in_place=False,
        index_url=index_url,
        extra_index_url=extra_index_url,
        find_links=find_links,
        offline=offline,
        no_index=no_index,
        skip_editables=skip_editables,
        torch_index=torch_index,
        base_python=None,
        check_paths=False,
    )
    if output is not None:
        store.check_target(output, force=force)
    text = (
        requirements_export(snap, options)
        if format is ExportFormat.requirements
        else pylock_text(snap, options)
    )
    if output is None:
        sys.stdout.write(text)
    else:
        store.write_atomic(output, text, force=force)
        typer.echo(f"wrote {output}")


class FleetFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


@app.command()
def fleet(
    refs: Annotated[
        list[str], typer.Argument(metavar="SNAPSHOTS...|DIR", help="Snapshot files or folders.")
    ],
    baseline: Annotated[
        str | None, typer.Option(help="Mark hosts that differ from this snapshot.")
    ] = None,
    format: Annotated[FleetFormat, typer.Option("--format")] = FleetFormat.table,
) -> None:
    """Compare many hosts' snapshots: group identical ones, name the odd ones out."""
    from envguard import store
    from envguard.fleet import compare

    paths: list[Path] = []
    for ref in refs:
        path = Path(ref)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.json") if p.is_file())
            if not found:
                _fail(f"{ref}: no *.json snapshots in this folder")
            paths += found
        else:
            paths.append(store.resolve(ref))
    labels = [p.stem for p in paths]
    if len(set(labels)) != len(labels):
        labels = [str(p) for p in paths]
    snapshots = {label: store.load(path) for label, path in zip(labels, paths, strict=True)}
    report = compare(snapshots, baseline=store.load(baseline) if baseline else None)
    if format is FleetFormat.json:
        from envguard.render.json import fleet_json

        sys.stdout.write(fleet_json(report))
    elif format is FleetFormat.markdown:
        from envguard.render.markdown import fleet_markdown

        sys.stdout.write(fleet_markdown(report))
    else:
        from envguard.render.table import fleet_table

        fleet_table(report, console())
    raise typer.Exit(0 if report.agree else 1)


def main() -> None:
    """Console entry point."""
    app(prog_name="envguard")
