"""typer's speed-ups, in one place: typer builds every command (each option a click
parameter, each help text parsed) at every start, to run one command or to print one help
screen. Here the group holds each command's typer definition and builds it when it is
looked up; the root --help lists the commands from their docstrings as click would.
tests/cli/test_lazy.py holds the lazy group to typer's own output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer
    from typer.models import CommandInfo


class LazyCommands(MutableMapping[str, Any]):
    """The group's commands by name, each built from its typer definition the first time
    it is looked up: a run builds the one command it runs, not all twelve. A command
    whose module has not loaded yet (``declared``) is loaded by ``load`` then: a run
    imports the module of the command it runs, not all five."""

    def __init__(
        self,
        infos: list[CommandInfo],
        *,
        build: Callable[[CommandInfo], Any],
        declared: Sequence[str] = (),
        load: Callable[[Sequence[str]], None] = lambda names: None,
    ):
        self._registered = infos  # the app's own list: it grows as command modules load
        self._declared = list(declared)
        self._load = load  # load(names): register their definitions; () for every one
        self._build = build
        self._built: dict[str, Any] = {}
        self._added: list[str] = []  # set here, built already
        self._gone: set[str] = set()

    def _infos(self) -> dict[str, CommandInfo]:
        from typer.main import get_command_name

        return {
            info.name or get_command_name(info.callback.__name__): info
            for info in self._registered
            if info.callback is not None
        }

    def __getitem__(self, name: str) -> Any:
        if name in self._gone:
            raise KeyError(name)
        if name not in self._built:
            infos = self._infos()
            if name not in infos and name in self._declared:
                self._load([name])
                infos = self._infos()
            self._built[name] = self._build(infos[name])
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command
        self._gone.discard(name)
        if name not in self._added:
            self._added.append(name)

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._built.pop(name, None)
        self._gone.add(name)

    def _names(self) -> list[str]:
        names = dict.fromkeys([*self._declared, *self._infos(), *self._added])
        return [n for n in names if n not in self._gone]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()  # never built to answer

    def __len__(self) -> int:
        return len(self._names())

    def short_helps(self, width: int) -> list[tuple[str, str, str | None]]:
        """(name, one-line help, help panel) of each visible command, cut as click cuts it."""
        import inspect

        self._load(())
        infos = self._infos()
        visible = [(n, infos[n]) for n in self if n in infos and not infos[n].hidden]
        if not visible:
            return []
        limit = width - 6 - max(len(n) for n, _ in visible)
        rows = []
        for name, info in visible:
            if info.short_help:
                text = inspect.cleandoc(info.short_help)
            else:
                doc = inspect.cleandoc(info.help) if info.help else inspect.getdoc(info.callback)
                text = _short_help(doc, limit) if doc else ""
            rows.append((name, text.strip(), _panel(info.rich_help_panel)))
        return rows


def _short_help(doc: str, limit: int) -> str:
    try:
        from typer._click.utils import make_default_short_help
    except ImportError:  # typer before 0.26 depends on click instead of vendoring it
        from click.utils import make_default_short_help  # type: ignore[import-not-found,no-redef,unused-ignore]
    return make_default_short_help(doc, limit)


def _panel(value: object) -> str | None:
    """A command's help panel: typer keeps an unset one as a ``DefaultPlaceholder``."""
    return value if isinstance(value, str) else None


def lazy_group(
    app: typer.Typer,
    *,
    declared: Sequence[str] = (),
    load: Callable[[Sequence[str]], None] = lambda names: None,
) -> Any:
    """The click group of ``app`` (its group class, its root options) whose commands are
    built when looked up; ``declared`` names every command, ``load`` registers those not
    registered yet (see LazyCommands)."""
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
        declared=declared,
        load=load,
        build=lambda info: get_command_from_info(
            info,
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
        ),
    )
    return group


def format_commands_lazily(commands: object, formatter: Any, *, panels: tuple[str, ...]) -> bool:
    """Write --help's command list from the definitions, without building a command; False
    when ``commands`` is not lazy (the caller then writes it from the built commands)."""
    if not isinstance(commands, LazyCommands):
        return False
    write_commands(commands.short_helps(formatter.width), formatter, panels=panels)
    return True


def built_short_helps(commands: Mapping[str, Any], width: int) -> list[tuple[str, str, str | None]]:
    """:meth:`LazyCommands.short_helps` for commands already built (typer's own group)."""
    visible = [(n, c) for n, c in commands.items() if not c.hidden]
    if not visible:
        return []
    limit = width - 6 - max(len(n) for n, _ in visible)
    return [
        (n, c.get_short_help_str(limit), _panel(getattr(c, "rich_help_panel", None)))
        for n, c in visible
    ]


def write_commands(
    rows: list[tuple[str, str, str | None]], formatter: Any, *, panels: tuple[str, ...]
) -> None:
    """The command list as click writes it, one section a help panel (in ``panels``' order,
    then "Commands" for those with none), every section's descriptions in one column."""
    if not rows:
        return
    widest = min(max(len(name) for name, _, _ in rows), 30)  # click's col_max
    order = [*panels, *sorted({p for _, _, p in rows if p and p not in panels})]
    sections = [(title, [r for r in rows if r[2] == title]) for title in order]
    sections.append(("Commands", [r for r in rows if r[2] is None]))
    for title, members in sections:
        if not members:
            continue
        spacing = 2 + widest - min(max(len(name) for name, _, _ in members), 30)
        with formatter.section(title):
            formatter.write_dl([(name, text) for name, text, _ in members], col_spacing=spacing)
