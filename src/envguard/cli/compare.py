"""`envguard diff`, `check` and `fleet`."""

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envguard.cli import app, console, fail
from envguard.errors import EnvguardError, UsageError

if TYPE_CHECKING:
    from envguard.models import Drift, Snapshot
    from envguard.policy import Policy


class DriftFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    github = "github"


def _emit_drift(drift: "Drift", fmt: DriftFormat) -> None:
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
    elif not drift.changes:  # the common, clean case needs no table (nor rich's import)
        from envguard.render.text import metrics_footer, summary

        typer.echo(summary(drift))
        footer = metrics_footer(drift)
        if footer:
            typer.echo(footer)
    else:
        from envguard.render.table import drift_table

        drift_table(drift, console())


def _live_request(recorded: Any, python: str | None, via: str | None) -> Any:
    """How to measure the live side as ``recorded`` was measured (a CaptureRequest)."""
    from envguard.capture.request import request_like
    from envguard.probe import recorded_python, resolve_python
    from envguard.tools import split_command

    if via:
        remote = python or str(recorded_python(recorded.executable, remote=True))
        return request_like(recorded, python=remote, via=split_command(via, option="--via"))
    if recorded.via:
        # Never run a command a snapshot file names: it may come from a pull request.
        raise UsageError(
            f"{recorded.name} was captured --via {recorded.via!r}",
            hint="pass --via yourself to measure that environment again",
        )
    target = resolve_python(python) if python else recorded_python(recorded.executable)
    label = f"--python {python}" if python else f"the snapshot's interpreter {target}"
    return request_like(recorded, python=target, python_label=label)


def _expected_and_live(
    path: Path, python: str | None, via: str | None
) -> tuple["Snapshot", "Snapshot"]:
    """Load the snapshot and measure the live side, the probe running while pydantic loads."""
    from envguard import store
    from envguard.capture.request import Recorded, start_capture

    text = store.read(path)
    recorded = Recorded.from_json(text)
    started = None
    early: EnvguardError | None = None
    if recorded is not None:
        try:
            started = start_capture(_live_request(recorded, python, via))
        except EnvguardError as exc:
            early = exc  # reported only if the file itself is valid: its errors come first
    try:
        expected = store.loads(text, source=str(path))
        if early is not None:
            raise early
        if started is None:
            started = start_capture(_live_request(Recorded.of(expected), python, via))
        from envguard.capture.snapshot import finish_capture

        return expected, finish_capture(started)
    except BaseException:
        if started is not None:
            started.probe.cancel()
        raise


def _fleet_items(paths: list[Path]) -> list[tuple[dict[str, str], str]]:
    """Each snapshot's fleet items; a big fleet is read by one process per core."""
    import os

    from envguard.fleet import load_items

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if len(paths) < 100 or not cores or cores < 2:
        return [load_items(str(p)) for p in paths]
    from concurrent.futures import ProcessPoolExecutor

    first = load_items(str(paths[0]))  # builds the model schemas once, before the fork
    with ProcessPoolExecutor(max_workers=min(cores, 8)) as pool:
        try:
            return [first, *pool.map(load_items, [str(p) for p in paths[1:]], chunksize=32)]
        except BaseException:  # one bad file: stop reading the rest
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _policy_and_threshold(
    fail_on: str | None, only: list[str] | None = None
) -> tuple["Policy", Any]:
    from dataclasses import replace

    from envguard.policy import SECTIONS, load_policy, parse_fail_on

    policy = load_policy()
    if only:
        unknown = [s for s in only if s not in SECTIONS]
        if unknown:
            fail(f"--only {unknown[0]}: not a section ({', '.join(SECTIONS)})")
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

    path = store.resolve(snapshot_ref) if snapshot_ref else store.newest()
    if against:
        expected, actual = store.load(path), store.load(against)
    else:
        expected, actual = _expected_and_live(path, python, via)
    from envguard.diff import diff as compute

    policy, threshold = _policy_and_threshold(fail_on, only)
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
    from envguard.fleet import compare_items, items

    paths: list[Path] = []
    for ref in refs:
        path = Path(ref)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.json") if p.is_file())
            if not found:
                fail(f"{ref}: no *.json snapshots in this folder")
            paths += found
        else:
            paths.append(store.resolve(ref))
    labels = [p.stem for p in paths]
    if len(set(labels)) != len(labels):
        labels = [str(p) for p in paths]
    loaded = dict(zip(labels, _fleet_items(paths), strict=True))
    base = store.load(baseline) if baseline else None
    report = compare_items(
        {label: found for label, (found, _) in loaded.items()},
        fingerprints={label: fp for label, (_, fp) in loaded.items()},
        baseline=items(base) if base is not None else None,
        baseline_name=base.name if base is not None else None,
    )
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
