"""The envguard program: the typer app, the click group behind it (each command built
when it is looked up), errors and interrupts said as one line, and the entry point."""

import signal
import sys
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from envguard import terminal
from envguard.cli.lazy import built_short_helps, format_commands_lazily, lazy_group, write_commands
from envguard.cli.numbers import bounded
from envguard.errors import EnvguardError, UsageError
from envguard.lifecycle import Interrupted, handle_signals, interrupt_behind, received_signal
from envguard.terminal import (
    OutputFailed,
    guard_output,
    interrupted,
    listen,
    loudness,
    output_failed,
    report,
    say,
    working_folder_gone,
)
from envguard.tools import own_variable
from envguard.version import __version__

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from rich.console import Console
    from typer._click import Context  # typer's vendored click (click itself before 0.26)

    from envguard.snapshots.measure import Measure


class _Group(TyperGroup):
    """Turns EnvguardError into `error: ...` on stderr and its exit code; usage errors
    (click's) are said the same way; help shows what each option takes."""

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **kwargs: Any,
    ) -> Any:
        run = {"args": args, "prog_name": prog_name, "complete_var": complete_var, **kwargs}
        terminal.begin_run()  # a CliRunner (or a script) runs the CLI many times in a process
        if not standalone_mode:
            return super().main(standalone_mode=False, **run)
        try:
            result = super().main(standalone_mode=False, **run)
        except Exception as exc:
            if not any(c.__name__ == "ClickException" for c in type(exc).__mro__):
                raise
            signum = received_signal()
            if signum is not None:  # a signal while parsing made this error
                _exit_interrupted(signum)
            ctx = getattr(exc, "ctx", None)
            if ctx is not None:
                sys.stderr.write(ctx.get_usage() + "\n")
            say("error", _one_line(exc.format_message()))  # type: ignore[attr-defined]
            if ctx is not None:
                say("hint", f"see '{ctx.command_path} --help'")
            sys.exit(getattr(exc, "exit_code", 2))
        signum = received_signal()
        if signum is not None:  # typer turns one in its parsing into a silent exit 130
            _exit_interrupted(signum)
        sys.exit(result if isinstance(result, int) else 0)

    def get_command(self, ctx: "Context", cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _tidy_options(command)
            _command_loudness(command)
        return command

    def list_commands(self, ctx: "Context") -> list[str]:
        return list(self.commands)  # names only: nothing is built to list them

    def format_commands(self, ctx: "Context", formatter: Any) -> None:
        if not format_commands_lazily(self.commands, formatter, panels=PANELS):
            rows = built_short_helps(self.commands, formatter.width)
            write_commands(rows, formatter, panels=PANELS)

    def invoke(self, ctx: "Context") -> object:
        try:
            result = super().invoke(ctx)
        except EnvguardError as exc:
            _interrupted_if_signalled()  # a lost interrupt made this error: say the cause
            report(exc)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (lifecycle.Interrupted)
            _interrupted(exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)
        except typer.Exit:
            _interrupted_if_signalled()
            raise
        _interrupted_if_signalled()
        return result


def command_line() -> _Group:
    """The click group behind ``envguard``: the root options now, each command when it is
    looked up (cli/lazy.py)."""
    group = lazy_group(app, declared=list(COMMANDS), load=load_commands)
    assert isinstance(group, _Group)
    return group


# Each command's module (envguard.cli.<module>), in the order the root --help lists them: a
# run imports the module of the command it runs (cli/lazy.py), and `envguard snapshot`
# loads no code of guard's or restore's. tests/cli/test_lazy.py holds this to the
# commands each module registers.
COMMANDS = {
    **dict.fromkeys(("snapshot", "show", "log", "list", "schema"), "capture"),
    **dict.fromkeys(("diff", "check", "fit", "fleet", "probe-payload"), "compare"),
    "gate": "gate",
    **dict.fromkeys(("rebuild", "export", "restore", "bisect"), "restore"),
    **dict.fromkeys(("guard", "history", "undo", "protect"), "guard"),
}


def load_commands(names: "Sequence[str]" = ()) -> None:
    """Register the commands ``names`` on ``app`` (every command when none is named): their
    modules are imported, and the app lists its commands in COMMANDS' order, whichever
    loaded first."""
    import importlib

    wanted = [COMMANDS[n] for n in names if n in COMMANDS] if names else COMMANDS.values()
    for module in dict.fromkeys(wanted):
        importlib.import_module(f"envguard.cli.{module}")
    from typer.main import get_command_name

    order = {name: i for i, name in enumerate(COMMANDS)}

    def place(info: Any) -> int:
        name = info.name or get_command_name(info.callback.__name__)
        return order.get(name, len(order))

    app.registered_commands.sort(key=place)


# What an option takes, in its help line (typer would say <str>).
_METAVARS = {
    "python": "PATH",
    "via": "PREFIX",
    "hosts": "HOSTS",
    "against": "SNAPSHOT",
    "lock": "FILE",
    "index_url": "URL",
    "extra_index_url": "URL",
    "find_links": "URL|DIR",
    "torch_index": "URL",
    "base_python": "PATH",
    "then": "CMD",
    "run": "CMD",
    "timeout": "SECONDS",
    "only": "SECTION",
    "name": "NAME",
    "note": "TEXT",
    "metric": "NAME=VALUE",
    "repo": "DIR",
    "file": "PATH",
    "cache": "DIR",
    "root": "DIR",
    "allow": "DIR",
    "store": "DIR",
    "env_file": "PATH",
    "out": "PATH",
    "baseline": "SNAPSHOT",
    "extra": "EXTRA",
    "group": "GROUP",
    "only_group": "GROUP",
    "no_group": "GROUP",
    "package": "NAME",
    "remote_uv": "PATH",
}


_TEXT_TYPES = ("text", "str", "string", "path")


def _tidy_options(command: Any) -> None:
    """Help that reads as the ecosystem's: a metavar for each option that takes text, and
    a flag named --no-x with no --no-no-x twin."""
    for param in command.params:
        if getattr(param, "param_type_name", "") != "option":
            continue
        if param.is_flag and any(o.startswith("--no-no-") for o in param.secondary_opts):
            param.secondary_opts = []
            param.show_default = False
        elif not param.is_flag and param.metavar is None and param.type.name in _TEXT_TYPES:
            param.metavar = _METAVARS.get(param.name, (param.name or "value").upper())
        elif not param.is_flag and param.metavar is None and "range" in param.type.name:
            param.metavar = "N"  # not <int range>
        elif not param.is_flag and param.metavar is None and param.type.name in ("float", "int"):
            param.metavar = _METAVARS.get(param.name, "N" if param.type.name == "int" else "X")
        param.type = bounded(param.type)  # every number through the one reader


def _one_line(message: str) -> str:
    """click's message on one line: it lays some out over lines ("Choose from:\n\t..."),
    which the error line would show as escapes. Only a break and the blanks around it
    become one space; what the user typed keeps its spaces."""
    import re

    return re.sub(r"\s*\n\s*", " ", message)


def _interrupted_if_signalled() -> None:
    signum = received_signal()
    if signum is not None:
        _interrupted(signum)


def _interrupted(signum: int) -> NoReturn:
    raise typer.Exit(interrupted(signum))


def _exit_interrupted(signum: int) -> NoReturn:
    """_interrupted() outside click's context: one line, and exit 128 + N."""
    try:
        _interrupted(signum)
    except typer.Exit as done:
        sys.exit(done.exit_code)


# The root --help lists the commands by the moment a user reaches for them (each command
# names its panel: typer's rich_help_panel), in the order a user meets these moments.
AFTER_A_GOOD_RUN = "After a good run"
BEFORE_A_RELAUNCH = "Before a relaunch"
BEFORE_AN_INSTALL = "Before an install"
AFTER_AN_INCIDENT = "After an incident"
GATES = "Gates: CI and the cluster"
FILES = "Files for other tools"
PANELS = (AFTER_A_GOOD_RUN, BEFORE_A_RELAUNCH, BEFORE_AN_INSTALL, AFTER_AN_INCIDENT, GATES, FILES)

HELP = """Snapshot, diff and rebuild ML training environments.

Before a relaunch, diff is for a person (a report to read) and check is for CI (the same
comparison as a gate: an exit code, annotations, a lockfile)."""

app = typer.Typer(
    cls=_Group,
    help=HELP,
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
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Only errors and requested data (--format json, --out -).",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Also say what runs (probe, uv) and how long."),
    ] = False,
) -> None:
    loudness(quiet=quiet, verbose=verbose)
    listen()


def _command_loudness(command: Any) -> None:
    """-q and -v after the command too (``envguard diff good -q``), as before it."""
    if any(p.name in ("quiet", "verbose") for p in command.params):
        return
    from typer.core import TyperOption

    for decls, name in ((["--quiet", "-q"], "quiet"), (["--verbose", "-v"], "verbose")):
        command.params.append(
            TyperOption(
                param_decls=[*decls, name],
                is_flag=True,
                default=False,
                expose_value=False,
                hidden=True,
                callback=lambda _ctx, _param, on, name=name: loudness(
                    quiet=on and name == "quiet", verbose=on and name == "verbose"
                ),
            )
        )


def console(*, stderr: bool = False) -> "Console":
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def fail(message: str) -> NoReturn:
    raise UsageError(message)


# Installed files against their RECORD, every file hashed (snapshot, diff).
Deep = Annotated[
    bool,
    typer.Option(
        help="Hash every installed file against its RECORD (default: the files that run,"
        " by size, hashed when written after their install)."
    ),
]


def measure(
    *,
    python: str | None = None,
    via: str | None = None,
    timeout: float = 120.0,
    allow: "Sequence[str | Path] | None" = None,
    root: str | None = None,
    deep: bool = False,
    pid: int | None = None,
) -> "Measure":
    """Where and how to measure, from a command's options: built here once, passed whole
    to the API (snapshots/measure.py turns it into the probe's request)."""
    from envguard.snapshots.measure import Measure

    return Measure(
        python=python,
        via=via,
        timeout=timeout,
        allow=tuple(str(a) for a in allow or ()),
        root=root,
        deep=deep,
        pid=pid,
    )


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


def main() -> None:
    """Console entry point."""
    # envguard uses no pydantic plugin, and looking for them costs an entry-point scan at
    # every start. Set for this process only: commands envguard runs for the user (--then)
    # get the environment as it was (tools.user_environ).
    own_variable("PYDANTIC_DISABLE_PLUGINS", "__all__")
    terminal.begin_run()
    handle_signals()
    import os

    if working_folder_gone():
        sys.exit(2)
    if "_ENVGUARD_COMPLETE" in os.environ:
        # Shell completion (`eval "$(_ENVGUARD_COMPLETE=source_bash envguard)"`, or zsh,
        # fish): typer's completion classes load only then, so --help pays nothing for them.
        from typer.completion import completion_init  # type: ignore[attr-defined]

        completion_init()
    guard_output()
    try:
        command_line().main(prog_name="envguard")
    except OutputFailed as exc:
        sys.exit(output_failed(exc))
    except (KeyboardInterrupt, Exception) as exc:  # a signal while typer builds the app
        signum = interrupt_behind(exc)
        if signum is None:
            raise  # a bug: its traceback
        _exit_interrupted(signum)
