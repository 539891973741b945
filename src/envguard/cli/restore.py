"""`envguard rebuild` and `export`."""

import json
import shlex
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envguard.cli.program import AFTER_AN_INCIDENT, FILES, app, console
from envguard.inuse import MAX_WAIT, InUse
from envguard.lifecycle import set_interrupt_hint
from envguard.terminal import data_out

if TYPE_CHECKING:
    from envguard.recovery.sources import Sources


class PlanFormat(str, Enum):
    table = "table"
    json = "json"
    shell = "shell"


class ExportFormat(str, Enum):
    requirements = "requirements"
    pylock = "pylock"


# uv's package-source options, the same on every command that installs or resolves.
IndexUrl = Annotated[str | None, typer.Option(help="Passed to uv.")]
ExtraIndexUrl = Annotated[list[str] | None, typer.Option(help="Passed to uv.")]
FindLinks = Annotated[list[str] | None, typer.Option(help="Passed to uv.")]
Offline = Annotated[bool, typer.Option(help="Passed to uv.")]
NoIndex = Annotated[bool, typer.Option(help="Passed to uv.")]
TorchIndex = Annotated[str | None, typer.Option(help="PyTorch index base (a mirror).")]
KeepBackups = Annotated[
    int, typer.Option(min=0, help="Keep this many envguard backups of the venv (the newest).")
]
# Processes running from the venv (envguard.inuse): the change is refused unless they end.
Force = Annotated[
    bool, typer.Option("--force", help="Change the venv even while processes run from it.")
]
Wait = Annotated[
    float,
    typer.Option(
        min=0.0,
        max=MAX_WAIT,
        metavar="SECONDS",
        help="Wait this long for processes running from the venv to end.",
    ),
]


def _sources(
    index_url: str | None,
    extra_index_url: list[str] | None,
    find_links: list[str] | None,
    offline: bool,
    no_index: bool,
    torch_index: str | None,
    *,
    remote: bool = False,
) -> "Sources":
    """The options as api.Sources (with --via, --find-links are the far side's paths)."""
    from dataclasses import replace

    from envguard import api

    sources = api.sources(
        index_url=index_url,
        extra_index_urls=extra_index_url or (),
        find_links=() if remote else find_links or (),
        offline=offline,
        no_index=no_index,
        torch_index=torch_index,
    )
    return replace(sources, find_links=tuple(find_links or ())) if remote else sources


@app.command(rich_help_panel=AFTER_AN_INCIDENT)
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
    keep_backups: KeepBackups = 1,
    format: Annotated[PlanFormat, typer.Option("--format")] = PlanFormat.table,
    index_url: IndexUrl = None,
    extra_index_url: ExtraIndexUrl = None,
    find_links: FindLinks = None,
    offline: Offline = False,
    no_index: NoIndex = False,
    skip_editables: Annotated[
        bool, typer.Option(help="Leave out editable installs whose path is gone.")
    ] = False,
    torch_index: TorchIndex = None,
    base_python: Annotated[
        str | None, typer.Option(help="Interpreter for the new venv [default: snapshot's X.Y.Z].")
    ] = None,
    then: Annotated[
        str | None, typer.Option(help="After a successful swap, run CMD with the new venv active.")
    ] = None,
    force: Force = False,
    wait: Wait = 0.0,
) -> None:
    """Recreate the snapshot's packages with uv, atomically.

    Plan, build beside the venv, verify, swap; --execute runs the plan.
    """
    from envguard import api
    from envguard.tools import split_command

    then_argv = split_command(then, option="--then") if then else None  # check before building
    options = api.RebuildOptions(
        venv=venv,
        in_place=in_place,
        sources=_sources(index_url, extra_index_url, find_links, offline, no_index, torch_index),
        skip_editables=skip_editables,
        base_python=base_python,
        no_backup=no_backup,
        keep_backups=keep_backups,
    )
    if not execute:
        the_plan = api.plan_rebuild(snapshot_ref, options=options)
        if format is PlanFormat.json:
            data_out().write(the_plan.model_dump_json(indent=2, by_alias=True) + "\n")
        elif format is PlanFormat.shell:
            from envguard.render.shell import shell_script

            data_out().write(shell_script(the_plan))
        else:
            from envguard.render.table import plan_table

            plan_table(the_plan, console())
        return
    err = console(stderr=True)
    with err.status("rebuilding") as status:
        outcome = api.rebuild(
            snapshot_ref,
            options=options,
            in_use=InUse(force=force, wait=wait),
            status=status.update,
            on_line=lambda line: err.print(f"  {line}", markup=False, style="dim"),
        )
    from envguard.render.text import rebuild_report

    typer.echo(rebuild_report(outcome))
    set_interrupt_hint(None)  # reported: a signal from here on needs no reminder
    if then_argv:
        typer.echo(f"running: {shlex.join(then_argv)}")
        api.run_then(then_argv, outcome.venv)


@app.command(rich_help_panel=FILES)
def export(
    snapshot_ref: Annotated[str, typer.Argument(metavar="SNAPSHOT", help="Path or name.")],
    format: Annotated[ExportFormat, typer.Option("--format")] = ExportFormat.requirements,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="[default: stdout]")] = None,
    index_url: IndexUrl = None,
    extra_index_url: ExtraIndexUrl = None,
    find_links: FindLinks = None,
    offline: Offline = False,
    no_index: NoIndex = False,
    skip_editables: Annotated[bool, typer.Option(help="Leave out editable installs.")] = False,
    torch_index: TorchIndex = None,
    force: Annotated[bool, typer.Option(help="Overwrite --output.")] = False,
) -> None:
    """Write a snapshot as pinned requirements.txt or pylock.toml.

    pylock.toml is PEP 751's lockfile.
    """
    from envguard import api

    sources = _sources(index_url, extra_index_url, find_links, offline, no_index, torch_index)
    text = api.export(
        snapshot_ref,
        format=format.value,
        sources=sources,
        skip_editables=skip_editables,
        output=output,
        force=force,
    )
    if output is None:
        data_out().write(text)
    else:
        typer.echo(f"wrote {output}")


class RestoreFormat(str, Enum):
    table = "table"
    json = "json"


@app.command(rich_help_panel=AFTER_AN_INCIDENT)
def restore(
    snapshot_ref: Annotated[
        str | None, typer.Argument(metavar="[SNAPSHOT]", help="[default: newest in snapshots/]")
    ] = None,
    venv: Annotated[
        Path | None,
        typer.Option(help="The venv to restore [default: .venv; with --via: the snapshot's]."),
    ] = None,
    execute: Annotated[bool, typer.Option(help="Do it (default: only print the plan).")] = False,
    via: Annotated[
        str | None,
        typer.Option(
            help="Restore on the far side of this prefix ('ssh gpu01', 'pct exec 200 --')."
        ),
    ] = None,
    python: Annotated[
        str | None, typer.Option(help="With --via: the Python there [default: python3].")
    ] = None,
    root: Annotated[
        str | None, typer.Option(help="Where the checkout holding the tracked files lies now.")
    ] = None,
    repos: Annotated[
        bool,
        typer.Option(
            "--repos",
            help="Also check out each repo's recorded commit (changes stashed first; no git"
            " filter runs: files are written as committed).",
        ),
    ] = False,
    store: Annotated[
        str | None, typer.Option(help="The content store [default: .store beside the snapshot].")
    ] = None,
    env_file: Annotated[
        str | None,
        typer.Option(help="Write the recorded variables here [default: NAME.env.sh in the cwd]."),
    ] = None,
    allow: Annotated[
        list[Path] | None,
        typer.Option(help="Also write files and caches the snapshot names under this folder."),
    ] = None,
    no_backup: Annotated[bool, typer.Option(help="Delete the old venv after the swap.")] = False,
    keep_backups: KeepBackups = 1,
    format: Annotated[RestoreFormat, typer.Option("--format")] = RestoreFormat.table,
    index_url: IndexUrl = None,
    extra_index_url: ExtraIndexUrl = None,
    find_links: FindLinks = None,
    offline: Offline = False,
    no_index: NoIndex = False,
    torch_index: TorchIndex = None,
    skip_editables: Annotated[
        bool, typer.Option(help="Leave out editable installs whose path is gone.")
    ] = False,
    base_python: Annotated[
        str | None, typer.Option(help="Interpreter for a new venv [default: snapshot's X.Y.Z].")
    ] = None,
    remote_uv: Annotated[
        str | None,
        typer.Option(help="With --via: uv's path there [default: its PATH, python -m uv]."),
    ] = None,
    hosts: Annotated[
        str | None,
        typer.Option(help="h1,h2,... or @hostfile: restore each through --via '... {host}'."),
    ] = None,
    jobs: Annotated[int, typer.Option(help="Hosts restored at once.")] = 16,
    timeout: Annotated[float, typer.Option(help="Seconds allowed per call through --via.")] = 600.0,
    then: Annotated[
        str | None,
        typer.Option(
            help="Afterwards run CMD here with the venv active and the variables set (not"
            " with --via)."
        ),
    ] = None,
    warm: Annotated[
        str | None,
        typer.Option(
            help="Afterwards run CMD (a warm-up compile) as --then does, and say how long it took."
        ),
    ] = None,
    warm_timeout: Annotated[
        float, typer.Option(help="Seconds --warm may take before it is stopped.")
    ] = 3600.0,
    force: Force = False,
    wait: Wait = 0.0,
) -> None:
    """Bring back everything the snapshot knows, each verified.

    Packages, repos, tracked files, compile caches and variables, in order.
    """
    from envguard import api
    from envguard.tools import split_command
    from envguard.units import seconds

    then_argv = split_command(then, option="--then") if then else None
    warm_argv = split_command(warm, option="--warm") if warm else None
    if warm_argv:  # checked before anything is restored, not once it is
        seconds(warm_timeout, option="--warm-timeout")
    for argv, option in ((then_argv, "--then"), (warm_argv, "--warm")):
        if argv and via:
            raise typer.BadParameter(
                f"{option} runs on this host; run it there yourself", param_hint=option
            )
    sources = _sources(
        index_url, extra_index_url, find_links, offline, no_index, torch_index, remote=bool(via)
    )
    options = api.RestoreOptions(
        venv=venv,
        execute=execute,
        python=python,
        via=via,
        root=root,
        repos=repos,
        store=store,
        env_file=env_file,
        sources=sources,
        skip_editables=skip_editables,
        base_python=base_python,
        no_backup=no_backup,
        keep_backups=keep_backups,
        allow=allow or (),
        timeout=timeout,
        remote_uv=remote_uv,
        in_use=InUse(force=force, wait=wait),
    )
    if hosts is not None:
        if via is None:
            raise typer.BadParameter("--hosts needs --via '... {host} ...'", param_hint="--via")
        _restore_fleet(api.restore_hosts(snapshot_ref, options, hosts=hosts, jobs=jobs), format)
        return
    if sys.stderr.isatty():  # a spinner and uv's lines for a person watching
        err = console(stderr=True)
        with err.status("restoring") as status:
            report = api.restore(
                snapshot_ref,
                options,
                status=status.update,
                on_line=lambda line: err.print(f"  {line}", markup=False, style="dim"),
            )
    else:  # a log: uv's lines as they come, no rich
        report = api.restore(
            snapshot_ref,
            options,
            on_line=lambda line: print(f"  {line}", file=sys.stderr),
        )
    if format is RestoreFormat.json:
        data_out().write(report.model_dump_json(indent=2, by_alias=True) + "\n")
    else:
        from envguard.render.text import restore_report

        typer.echo(restore_report(report))
    set_interrupt_hint(None)
    if not report.ok:
        raise typer.Exit(1)
    if then_argv and execute:
        typer.echo(f"running: {shlex.join(then_argv)}")
        api.run_then(then_argv, venv or Path(".venv"), env=api.restore_env(snapshot_ref))
    if warm_argv and execute:
        from envguard.render.text import warmup_line

        typer.echo(f"warming up: {shlex.join(warm_argv)}")
        env = api.restore_env(snapshot_ref)
        done = api.warm(warm_argv, venv or Path(".venv"), env=env, timeout=warm_timeout)
        typer.echo(warmup_line(done))
        if done.code != 0:
            raise typer.Exit(1)


def _restore_fleet(results: list[tuple[str, Any]], format: RestoreFormat) -> None:
    """Each host's report (or its error line); exit 1 unless every host restored cleanly."""
    from envguard.render.text import printable, restore_report

    failed = [host for host, r in results if isinstance(r, str) or not r.ok]
    if format is RestoreFormat.json:
        hosts = {
            host: {"error": r} if isinstance(r, str) else r.model_dump(mode="json", by_alias=True)
            for host, r in results
        }
        data_out().write(json.dumps({"hosts": hosts, "failed": failed}, indent=2) + "\n")
    else:
        for host, result in results:
            typer.echo(printable(f"== {host}"))
            typer.echo(
                printable(f"error: {result}") if isinstance(result, str) else restore_report(result)
            )
        typer.echo(
            f"{len(results) - len(failed)} of {len(results)} hosts restored"
            + (f"; not: {', '.join(failed)}" if failed else "")
        )
    if failed:
        raise typer.Exit(1)


@app.command(rich_help_panel=AFTER_AN_INCIDENT)
def bisect(
    good: Annotated[str, typer.Argument(metavar="GOOD", help="The good snapshot.")],
    run: Annotated[str, typer.Option(help="The check: good when it exits 0 (or by --metric).")],
    bad: Annotated[
        str | None, typer.Option(help="The bad snapshot [default: the live environment].")
    ] = None,
    python: Annotated[
        str | None, typer.Option(help="Without --bad: the live interpreter or venv.")
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Judge by NAME=value (or JSON) the command prints (NaN or inf: bad).",
        ),
    ] = None,
    min: Annotated[float | None, typer.Option("--min", help="Good when the metric >= X.")] = None,
    max: Annotated[float | None, typer.Option("--max", help="Good when the metric <= X.")] = None,
    shell: Annotated[bool, typer.Option(help="Run --run through sh -c.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds per run (then: skip).")] = 600.0,
    max_steps: Annotated[int, typer.Option(min=2, help="At most this many runs.")] = 30,
    keep: Annotated[bool, typer.Option(help="Keep the scratch venv.")] = False,
    resume: Annotated[
        bool, typer.Option(help="Reuse the results logged by an earlier run.")
    ] = False,
    repo: Annotated[
        Path | None,
        typer.Option(
            help="When the good environment runs bad with today's code: test the drifted"
            " environment at the snapshot's commit and bisect this repo's commits since it,"
            " in a temporary worktree."
        ),
    ] = None,
    format: Annotated[RestoreFormat, typer.Option("--format")] = RestoreFormat.table,
    index_url: IndexUrl = None,
    extra_index_url: ExtraIndexUrl = None,
    find_links: FindLinks = None,
    offline: Offline = False,
    no_index: NoIndex = False,
    torch_index: TorchIndex = None,
) -> None:
    """Find which drifted change or commit breaks the run.

    Or show that the environment is not the cause.
    """
    from envguard import api
    from envguard.render.text import printable

    sources = _sources(index_url, extra_index_url, find_links, offline, no_index, torch_index)
    count = [0, 0]  # runs made now (answers from the log are not runs); units to try

    def started(units: Any) -> None:
        count[1] = len(units)
        bound = 2 * (len(units) - 1 if len(units) > 1 else 1).bit_length() + 3  # max is --max
        typer.echo(
            f"bisect: {len(units)} change{'s' * (len(units) != 1)} to try; about {bound} runs"
            f" for a single culprit (at most {max_steps})",
            err=True,
        )

    def progress(step: Any) -> None:
        units = [u for u in step.units if not u.startswith("commit:")]
        shown_units = units[:3] + ([f"and {len(units) - 3} more"] if len(units) > 3 else [])
        applied = ", ".join(shown_units) or "none (the good environment)"
        if len(units) == count[1] > 1:
            applied = f"all {len(units)} (the bad environment)"
        at = [u.removeprefix("commit:") for u in step.units if u.startswith("commit:")]
        applied += f" at commit {at[0]}" if at else ""
        shown = "" if step.metric is None else f" ({metric}={step.metric:g})"
        shown += f" ({step.why})" if step.why else ""
        if step.logged:
            where = "from the log"
        else:
            count[0] += 1
            where = f"run {count[0]} of at most {max_steps}"
        typer.echo(printable(f"{where}: {applied} -> {step.result}{shown}"), err=True)

    options = api.BisectOptions(
        run=run,
        bad=bad,
        python=python,
        shell=shell,
        metric=metric,
        minimum=min,
        maximum=max,
        timeout=timeout,
        max_steps=max_steps,
        keep=keep,
        resume=resume,
        repo=repo,
        sources=sources,
    )
    report = api.bisect(good, options, on_step=progress, on_units=started)
    if format is RestoreFormat.json:
        data_out().write(report.to_json() + "\n")
    else:
        typer.echo(printable(f"bisect {report.good} -> {report.bad}: {report.verdict}"))
        if report.complete:  # a group's packages (a single change says itself)
            for culprit in report.culprits:
                names: list[str] = culprit["packages"]  # type: ignore[assignment]
                if len(names) > 1:
                    more = f" and {len(names) - 12} more" if len(names) > 12 else ""
                    typer.echo(printable(f"  {culprit['label']}: {', '.join(names[:12])}{more}"))
        for line in report.other_drift[:20]:
            typer.echo(printable(f"  also drifted: {line}"))
        if len(report.other_drift) > 20:
            typer.echo(f"  and {len(report.other_drift) - 20} more (--format json lists them)")
        built = sum(1 for s in report.steps if not s.logged)
        logged = len(report.steps) - built
        reused = f" and {logged} answer{'s' * (logged != 1)} from the log" if logged else ""
        envs = f" in {report.installs} build{'s' * (report.installs != 1)} of the scratch venv"
        typer.echo(
            printable(
                f"{built} run{'s' * (built != 1)}{envs}{reused}; every step is in {report.log}"
            )
        )
        if report.scratch:
            typer.echo(printable(f"the scratch venv is kept at {report.scratch}"))
        if not report.complete:
            typer.echo(
                "hint: the search stopped at --max-steps; run it again with --resume and a"
                " larger --max-steps to go on from the log",
                err=True,
            )
    raise typer.Exit(report.exit_code)
