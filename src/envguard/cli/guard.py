"""`envguard guard`, `history`, `undo` and `protect`."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperCommand

from envguard.cli.program import AFTER_AN_INCIDENT, BEFORE_AN_INSTALL, OutputFormat, app, console
from envguard.cli.restore import (
    ExtraIndexUrl,
    FindLinks,
    Force,
    IndexUrl,
    KeepBackups,
    NoIndex,
    Offline,
    TorchIndex,
    Wait,
)
from envguard.inuse import InUse
from envguard.terminal import data_out, quiet

if TYPE_CHECKING:
    from collections.abc import Callable

    from pydantic import BaseModel

    # click as typer vendors it (typer >= 0.26; before, typer depends on click itself).
    from typer._click.core import Context, Parameter

    from envguard.api.guarding import Preview

# What a command's first word is when it is an install command, not a snapshot's name.
_INSTALLERS = ("uv", "pip", "pip3", "python", "python3")

Venv = Annotated[
    Path | None,
    typer.Option(help="The venv [default: $VIRTUAL_ENV, else ./.venv].", metavar="DIR"),
]
Format = Annotated[OutputFormat, typer.Option("--format")]


def _write(document: "BaseModel") -> None:
    data_out().write(document.model_dump_json(indent=2, by_alias=True) + "\n")


def _waiting(line: str) -> None:
    """The line said while the installer's dry run resolves: on stderr (stdout may be the
    JSON document), dimmed for a terminal unless NO_COLOR is set (no-color.org)."""
    import os
    import sys

    from envguard.render.text import printable

    text = printable(line)
    if sys.stderr.isatty() and not os.environ.get("NO_COLOR"):
        text = f"\x1b[2m{text}\x1b[0m"
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _is_installer(word: str) -> bool:
    import os
    import re

    name = os.path.basename(word)
    return name in _INSTALLERS or re.fullmatch(r"(pip|python)3\.\d+", name) is not None


def _split(words: list[str]) -> tuple[str | None, tuple[str, ...] | str]:
    """(SNAPSHOT or None, the install command: words, or one string) from what followed
    `guard`."""
    from envguard.errors import UsageError

    snapshot = None
    if words[:1] == ["--"]:  # `-- COMMAND`: no snapshot (_no_snapshot_kept)
        words = words[1:]
    elif len(words) >= 2 and words[1] == "--":  # SNAPSHOT -- COMMAND: click keeps this "--"
        snapshot, words = words[0], words[2:]
    elif len(words) >= 2 and not (
        _is_installer(words[0]) or _is_installer(words[0].split(" ", 1)[0])
    ):  # a program's path may hold a blank: "/my venv/bin/pip"
        snapshot, words = words[0], words[1:]
    if len(words) == 1:
        return snapshot, words[0]
    if not words:
        raise UsageError(
            "no install command to guard", hint="envguard guard -- uv pip install PACKAGE"
        )
    return snapshot, tuple(words)


class _GuardCommand(TyperCommand):
    """`guard` with its options also after the snapshot's name, before the command:
    ``envguard guard good --venv V -- uv pip install X`` (click stops at the first word
    that is not an option, so that the install command's own options stay its own)."""

    def parse_args(self, ctx: "Context", args: list[str]) -> list[str]:
        params = self.get_params(ctx)
        return super().parse_args(ctx, _no_snapshot_kept(params, _options_first(params, args)))


def _widths(params: list["Parameter"]) -> "Callable[[str], int]":
    """The words each of guard's options uses (0: a word that is not one of them); which
    words are options, and which take a value, is what the command declares."""
    takes_value = {
        spelled: not (getattr(p, "is_flag", False) or getattr(p, "count", False))
        for p in params
        if p.param_type_name == "option"
        for spelled in (*p.opts, *p.secondary_opts)
    }

    def width(word: str) -> int:
        name, eq, _ = word.partition("=")
        if name not in takes_value:
            return 0
        return 2 if takes_value[name] and not eq else 1

    return width


def _no_snapshot_kept(params: list["Parameter"], args: list[str]) -> list[str]:
    """``args`` with a second "--" where the first follows guard's options at once: no
    snapshot was named, and click drops that "--", after which `sudo pip install X` or
    `conda install X` read as a snapshot named `sudo` (or `/usr/bin/env`, read as one)
    and a command; _split reads the kept "--" as "everything after is the command"."""
    width = _widths(params)
    i = 0
    while i < len(args) and args[i] != "--" and width(args[i]):
        i += width(args[i])
    if i < len(args) and args[i] == "--":
        return [*args[: i + 1], "--", *args[i + 1 :]]
    return args


def _options_first(params: list["Parameter"], args: list[str]) -> list[str]:
    """``args`` with guard's own options that follow the snapshot's name moved before it."""
    width = _widths(params)
    i = 0
    while i < len(args) and args[i] != "--" and width(args[i]):
        i += width(args[i])
    if i >= len(args) or args[i] == "--" or _is_installer(args[i].split(" ", 1)[0]):
        return args
    end = i + 1
    while end < len(args) and args[end] != "--" and width(args[end]):
        end += width(args[end])
    return [*args[:i], *args[i + 1 : end], args[i], *args[end:]]


def _show(seen: "Preview") -> None:
    from envguard.render.text import printable

    typer.echo(printable(f"{seen.headline} (against {seen.against})"))
    for line in seen.drift.verdict if seen.drift is not None else ():
        typer.echo(printable(f"  {line}"))
    for change in seen.written_over():  # another distribution's file: no verdict line
        typer.echo(printable(f"  {change.message}"))
    if not quiet():
        for note in seen.notes:
            typer.echo(printable(f"note: {note}"), err=True)


@app.command(
    cls=_GuardCommand,
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    rich_help_panel=BEFORE_AN_INSTALL,
)
def guard(
    words: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[SNAPSHOT] -- COMMAND...",
            help="A snapshot to hold the venv to as well [default: none; always the venv"
            " as it is], then the install command.",
        ),
    ] = None,
    venv: Venv = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow", help="Let the install change this package (repeatable).", metavar="NAME"
        ),
    ] = None,
    fail_on: Annotated[
        str,
        typer.Option(
            help="Refuse when a change to what is installed reaches: critical, warning,"
            " info, never.",
            metavar="LEVEL",
        ),
    ] = "critical",
    preview: Annotated[
        bool, typer.Option("--preview", help="Only say what the install would change.")
    ] = False,
    shell: Annotated[
        bool,
        typer.Option(
            "--shell", help="Split a one-string command that holds shell syntax (never a shell)."
        ),
    ] = False,
    timeout: Annotated[
        float, typer.Option(help="Seconds the dry run may take.", min=0.001)
    ] = 120.0,
    keep: Annotated[
        int, typer.Option(min=1, help="Keep this many records of guarded changes (the newest).")
    ] = 20,
    force: Force = False,
    wait: Wait = 0.0,
    allow_build: Annotated[
        bool,
        typer.Option(
            "--allow-build",
            help="Let the preview run a build backend (a local project, an sdist).",
        ),
    ] = False,
    format: Annotated[
        OutputFormat,
        typer.Option(
            "--format", help="json: one document on stdout; the installer's output goes to stderr."
        ),
    ] = OutputFormat.table,
) -> None:
    """Preview an install as drift; refuse it or run it.

    A run is recorded, so that undo can bring the venv back.
    """
    from envguard import api
    from envguard.render.text import printable

    as_json = format is OutputFormat.json
    snapshot, command = _split(list(words or ()))
    options = api.GuardOptions(
        venv=venv,
        against=snapshot,
        fail_on=fail_on,
        allow=tuple(allow or ()),
        timeout=timeout,
        shell=shell,
        keep=keep,
        in_use=InUse(force=force, wait=wait),
        waiting=None if quiet() else _waiting,
        allow_build=allow_build,
    )
    if preview:
        seen = api.preview(command, options)
        if as_json:
            _write(seen.report())
        else:
            _show(seen)
        raise typer.Exit(1 if seen.blocking else 0)
    done = api.guard(
        command,
        options,
        on_preview=(lambda _: None) if as_json else _show,
        stdout_to_stderr=as_json,
    )
    if as_json:
        _write(done.report())
    if not done.ran:
        import shlex

        # A split pair (siblings) is named "torch torchvision": allowing its first unblocks
        # it; an extension left unable to load, by its package.
        names = done.preview.allow_names()
        typer.echo(
            printable(f"refused (--fail-on {fail_on}): nothing was installed or removed"),
            err=True,
        )
        flags = " ".join(f"--allow {n}" for n in names)
        where = shlex.quote(str(done.preview.venv))
        again = f"envguard guard --venv {where} {flags} -- {done.preview.command.label()}"
        typer.echo(printable(f"hint: to let it change {', '.join(names)}: {again}"), err=True)
        raise typer.Exit(1)
    assert done.record is not None
    if not quiet() and not as_json:
        typer.echo(printable(f"recorded #{done.record.number}: {done.change}"), err=True)
    raise typer.Exit(done.exit_code or 0)


@app.command(rich_help_panel=BEFORE_AN_INSTALL)
def history(venv: Venv = None, format: Format = OutputFormat.table) -> None:
    """The guarded changes of a venv, newest first."""
    from envguard import api
    from envguard.render.text import printable

    if format is OutputFormat.json:
        _write(api.history_report(venv=venv))
        return
    records = api.history(venv=venv)
    if not records:
        typer.echo("no guarded changes recorded for this venv (envguard guard -- ...)")
        return
    for n, record in enumerate(records, start=1):
        import shlex

        code = "" if record.exit_code in (0, None) else f" [exit {record.exit_code}]"
        allowed = f" (allowed: {', '.join(record.allowed)})" if record.allowed else ""
        typer.echo(
            printable(
                f"{n:>3}  #{record.number}  {record.created}  {shlex.join(record.command)}"
                f"{allowed}{code}"
            )
        )
        typer.echo(printable(f"       {record.change or record.planned}"))


@app.command(rich_help_panel=AFTER_AN_INCIDENT)
def undo(
    steps: Annotated[
        int, typer.Argument(min=1, metavar="[N]", help="Go back before the Nth newest change.")
    ] = 1,
    venv: Venv = None,
    index_url: IndexUrl = None,
    extra_index_url: ExtraIndexUrl = None,
    find_links: FindLinks = None,
    offline: Offline = False,
    no_index: NoIndex = False,
    torch_index: TorchIndex = None,
    in_place: Annotated[
        bool, typer.Option(help="uv pip sync straight into the venv (fastest, not atomic).")
    ] = False,
    keep_backups: KeepBackups = 1,
    force: Force = False,
    wait: Wait = 0.0,
    format: Format = OutputFormat.table,
) -> None:
    """Bring the venv back to before a guarded change.

    An atomic rebuild. With no guarded change recorded, restore SNAPSHOT is the way back.
    """
    from envguard import api
    from envguard.lifecycle import set_interrupt_hint
    from envguard.render.text import printable, rebuild_report

    sources = api.sources(
        index_url=index_url,
        extra_index_urls=extra_index_url or (),
        find_links=find_links or (),
        offline=offline,
        no_index=no_index,
        torch_index=torch_index,
    )
    err = console(stderr=True)
    with err.status("undoing") as status:
        done = api.undo(
            steps,
            venv=venv,
            sources=sources,
            in_place=in_place,
            keep_backups=keep_backups,
            in_use=InUse(force=force, wait=wait),
            status=status.update,
            on_line=lambda line: err.print(f"  {line}", markup=False, style="dim"),
        )
    set_interrupt_hint(None)
    if format is OutputFormat.json:
        _write(done.report())
        return
    import shlex

    before = f"#{done.target.number} ({shlex.join(done.target.command)})"
    typer.echo(printable(f"back to before {before}: {done.restored}"))
    typer.echo(rebuild_report(done.outcome))


@app.command(rich_help_panel=BEFORE_AN_INSTALL)
def protect(
    venv: Venv = None,
    off: Annotated[bool, typer.Option("--off", help="Remove every trace of it.")] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Say whether it is in place, as written.")
    ] = False,
    format: Format = OutputFormat.table,
) -> None:
    """Route later pip and uv installs in the venv through guard."""
    from envguard import api
    from envguard.render.text import printable

    if format is OutputFormat.json:
        report = api.protection_report("check" if check else "off" if off else "protect", venv=venv)
        _write(report)
        if check and (not report.protected or report.edited or report.missing or report.unpinned):
            raise typer.Exit(1)
        return
    if check:
        found = api.protection(venv=venv)
        if found is None:
            typer.echo("not protected (envguard protect)")
            raise typer.Exit(1)
        for rel in found.edited:
            typer.echo(printable(f"edited by hand: {found.venv / rel}"))
        for rel in found.missing:
            typer.echo(printable(f"missing: {found.venv / rel}"))
        for pin in found.unpinned:
            typer.echo(printable(f"not as pinned: {pin}"))
        for rel in found.outdated:
            typer.echo(printable(f"an earlier envguard's: {found.venv / rel}"))
        if found.edited or found.missing or found.outdated:
            typer.echo("hint: envguard protect writes them again", err=True)
        if found.unpinned:
            typer.echo(
                "hint: installed past the protection; envguard undo or rebuild brings the"
                " pinned versions back, envguard protect pins what is there now",
                err=True,
            )
        if found.edited or found.missing or found.unpinned or found.outdated:
            raise typer.Exit(1)
        typer.echo(printable(f"protected: {found.venv} ({len(found.files)} files as written)"))
        return
    if off:
        removed = api.unprotect(venv=venv)
        if removed is None:
            typer.echo("not protected: nothing to remove")
            return
        for rel in removed.edited:
            if rel in removed.files:
                typer.echo(
                    printable(f"note: {removed.venv / rel} had been edited by hand"), err=True
                )
        for note in removed.notes:
            typer.echo(printable(f"note: {note}"), err=True)
        typer.echo(printable(f"unprotected {removed.venv}: removed {', '.join(removed.files)}"))
        return
    done = api.protect(venv=venv)
    typer.echo(printable(f"protected {done.venv}: {', '.join(done.files)}"))
    for note in done.notes:
        typer.echo(printable(f"note: {note}"), err=True)
