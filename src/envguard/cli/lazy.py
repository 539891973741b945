"""typer's speed-ups, in one place: typer builds every command (each option a click
parameter, each help text parsed) at every start, to run one command or to print one help
screen. Here the group holds each command's typer definition and builds it when it is
looked up; the root --help lists the commands from their docstrings as click would.
tests/cli/test_lazy.py holds the lazy group to typer's own output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer
    from typer.models import CommandInfo


class LazyCommands(MutableMapping[str, Any]):
    """The group's commands by name, each built from its typer definition the first time
    it is looked up: a run builds the one command it runs, not all twelve."""

    def __init__(self, infos: list[CommandInfo], *, build: Callable[[CommandInfo], Any]):
        from typer.main import get_command_name

        self._infos = {
            info.name or get_command_name(info.callback.__name__): info
            for info in infos
            if info.callback is not None
        }
        self._build = build
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            self._built[name] = self._build(self._infos[name])
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command
        self._infos.setdefault(name, None)  # type: ignore[arg-type]

    def __delitem__(self, name: str) -> None:
        self._built.pop(name, None)
        del self._infos[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._infos)

    def __len__(self) -> int:
        return len(self._infos)

    def short_helps(self, width: int) -> list[tuple[str, str]]:
        """(name, one-line help) of each visible command, cut as click cuts it."""
        import inspect

        try:
            from typer._click.utils import make_default_short_help
        except ImportError:  # typer before 0.26 depends on click instead of vendoring it
            from click.utils import make_default_short_help  # type: ignore[import-not-found,no-redef,unused-ignore]

        visible = [(n, i) for n, i in self._infos.items() if i is not None and not i.hidden]
        if not visible:
            return []
        limit = width - 6 - max(len(n) for n, _ in visible)
        rows = []
        for name, info in visible:
            if info.short_help:
                text = inspect.cleandoc(info.short_help)
            else:
                doc = inspect.cleandoc(info.help) if info.help else inspect.getdoc(info.callback)
                text = make_default_short_help(doc, limit) if doc else ""
            rows.append((name, text.strip()))
        return rows


def lazy_group(app: typer.Typer) -> Any:
    """The click group of ``app`` (its group class, its root options) whose commands are
    built when looked up."""
    import copy

    from typer.main import get_command_from_info, get_group_from_info
    from typer.models import TyperInfo

    root = copy.copy(app)
    root.registered_commands = []
    group = get_group_from_info(
        TyperInfo(root),
        pretty_exceptions_short=app.pretty_exceptions_short,
        rich_markup_mode=app.rich_markup_mode,
        suggest_commands=app.suggest_commands,
    )
    group.commands = LazyCommands(
        app.registered_commands,
        build=lambda info: get_command_from_info(
            info,
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
        ),
    )
    return group


def format_commands_lazily(commands: object, formatter: Any) -> bool:
    """Write --help's command list from the definitions, as click writes it, without
    building a command; False when ``commands`` is not lazy (click then writes it)."""
    if not isinstance(commands, LazyCommands):
        return False
    rows = commands.short_helps(formatter.width)
    if rows:
        with formatter.section("Commands"):
            formatter.write_dl(rows)
    return True
