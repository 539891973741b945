"""`envguard diff`, `check` and `fleet`."""

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from envguard.cli import app, console

if TYPE_CHECKING:
    from envguard.compare.models import Drift
    from envguard.compare.policy import Policy


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


def _exit(drift: "Drift", policy: "Policy") -> NoReturn:
    raise typer.Exit(1 if drift.reaches(policy.fail_on) else 0)


Allow = Annotated[
    list[Path] | None,
    typer.Option(
        help="Also read files, caches and repos the snapshot names under this folder"
        " [default: only the cwd, its work tree and the cache folders] (repeatable)."
    ),
]
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
    allow: Allow = None,
) -> None:
    """What drifted since the known-good snapshot, worst first. Exit 1 on drift."""
    from envguard import api

    policy = api.load_policy(fail_on=fail_on, only=only or ())
    drift = api.diff(
        snapshot_ref, against, python=python, via=via, policy=policy, allow=allow or ()
    )
    _emit_drift(drift, format)
    _exit(drift, policy)


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
    allow: Allow = None,
) -> None:
    """The CI gate: fail when the environment or a lockfile drifted from the snapshot."""
    import os

    fmt = format or (
        DriftFormat.github if os.environ.get("GITHUB_ACTIONS") == "true" else DriftFormat.table
    )
    from envguard import api

    policy = api.load_policy(fail_on=fail_on)
    drift = api.check(
        snapshot_ref, lock=lock, against=against, python=python, policy=policy, allow=allow or ()
    )
    _emit_drift(drift, fmt)
    _exit(drift, policy)


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
    from envguard import api

    report = api.fleet(refs, baseline=baseline)
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
