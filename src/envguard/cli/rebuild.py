"""`envguard rebuild` and `export`."""

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envguard.cli import app, console, fail

if TYPE_CHECKING:
    from envguard.models import Snapshot


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
    from envguard.plan import PlanOptions
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
        torch_index=torch_index,
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
    from envguard.tools import split_command

    then_argv = split_command(then, option="--then") if then else None  # check before building
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
        fail(f"--venv {venv}: no such venv to sync in place")
    if execute:
        from envguard.rebuild import check_target

        check_target(options.venv, label=f"--venv {venv}")
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
    _execute_rebuild(the_plan, snap, no_backup=no_backup, then=then_argv)


def _execute_rebuild(
    the_plan: Any, snap: "Snapshot", *, no_backup: bool, then: tuple[str, ...] | None
) -> None:
    import shlex

    from envguard.rebuild import execute, not_restored, remove_stale, run_then

    err = console(stderr=True)
    venv = Path(the_plan.venv)
    for line in remove_stale(venv):
        err.print(line, markup=False)
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
    typer.echo(
        f"rebuilt {venv} from {the_plan.snapshot}: {the_plan.packages} packages,"
        " verified against the snapshot"
    )
    if outcome.backup is not None:
        typer.echo(f"the previous venv is kept at {outcome.backup}")
    for note in outcome.notes:
        typer.echo(note)
    for hint in not_restored(snap, outcome.live) if outcome.live else ():
        typer.echo(f"not restored: {hint}")
    if then:
        typer.echo(f"running: {shlex.join(then)}")
        run_then(then, venv)


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
