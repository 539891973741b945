"""No build code before the decision: a preview that would run a build backend (a local
project, an sdist, a VCS checkout, an in-tree backend) says so and refuses, unless the user
gave ``--allow-build``.

Reading a source's metadata runs its build backend, with the user's rights: it can write
into the venv before guard has decided anything. The dry run is held to wheels (uv's
``--no-build``, pip's ``--only-binary :all:``: an sdist on the index is not built). What
the command or its requirements files name to build (a local folder or archive, an
editable, a VCS URL) is refused before anything runs: pip builds those even under
``--only-binary``. uv builds a workspace's own members whatever ``--no-build`` says: for
`uv add|remove|sync`, a local path to add, and a project or workspace member whose
metadata is dynamic (its build backend has to say it), refuse the same way. The install
is held to wheels as its dry run was (the same flag appended to it), so that it installs
the versions the preview showed; with --allow-build both build."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from envguard.errors import UsageError
from envguard.guard.command import InstallCommand

ALLOW = "--allow-build"
# Workspace members looked at, at most (a glob can name many).
_MEMBERS = 256


def without_builds(command: InstallCommand) -> InstallCommand:
    """``command`` as its dry run runs it: nothing built (last, so that it wins over the
    command's own --no-binary)."""
    if command.action == "uninstall":  # nothing is built; neither takes the flag
        return command
    held = ("--no-build",) if command.tool == "uv" else ("--only-binary=:all:",)
    return replace(command, args=(*command.args, *held))


def held_to_wheels(command: InstallCommand) -> tuple[str, ...]:
    """The install's argv, held to wheels as its dry run was (the same flag, last): an
    index whose newest release is an sdist would otherwise give the install another
    version than the preview showed, and build it. uv has no variable for it."""
    return (*command.argv, *without_builds(command).args[len(command.args) :])


def check_sources(command: InstallCommand, in_files: tuple[str, ...]) -> None:
    """UsageError when previewing ``command`` would build a source it, or its requirements
    files (``in_files``), name (uv reads some projects' metadata without building; their
    install builds, so they are refused as well: the install is held to wheels too)."""
    if command.action == "uninstall":
        return
    named = [*command.sources, *in_files]
    if named:
        _refuse(named)


def check_project(command: InstallCommand, *, cwd: Path) -> None:
    """UsageError when previewing uv's project ``command`` in ``cwd`` would build: a local
    source it adds, or the project or a workspace member with dynamic metadata."""
    if not command.project:
        return
    if command.sources:
        _refuse(list(command.sources))
    root = next((d for d in (cwd, *cwd.parents) if (d / "pyproject.toml").is_file()), None)
    if root is None:
        return
    built = [str(d) for d in _members(root) if _dynamic(d / "pyproject.toml")]
    if built:
        _refuse([f"the project at {built[0]}", *built[1:]])


def _members(root: Path) -> list[Path]:
    """``root`` and its workspace's members (`[tool.uv.workspace] members`, globs)."""
    found = [root]
    members = _table(
        _table(_table(_pyproject(root / "pyproject.toml").get("tool")).get("uv")).get("workspace")
    ).get("members")
    for pattern in members if isinstance(members, list) else []:
        if isinstance(pattern, str) and not os.path.isabs(pattern) and ".." not in pattern:
            found += [p for p in sorted(root.glob(pattern)) if (p / "pyproject.toml").is_file()]
        if len(found) > _MEMBERS:
            break
    return found[:_MEMBERS]


def _dynamic(pyproject: Path) -> bool:
    """A project whose metadata only its build backend can say."""
    data = _pyproject(pyproject)
    dynamic = _table(data.get("project")).get("dynamic")
    return "build-system" in data and isinstance(dynamic, list) and bool(dynamic)


def _pyproject(path: Path) -> dict[str, object]:
    from envguard.compare.lockfiles.common import parse_toml
    from envguard.guard.command import read_confined

    return dict(
        parse_toml(read_confined(path, label=str(path), what="pyproject.toml"), where=str(path))
    )


def _table(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _refuse(named: list[str]) -> None:
    shown = named[0] if len(named) == 1 else f"{named[0]} (and {len(named) - 1} more)"
    raise UsageError(
        f"{shown}: previewing this install would run its build backend, whose code"
        " could change the venv before envguard guard decides; nothing was run",
        hint=hint(),
    )


def refused(exc: UsageError) -> UsageError:
    """The dry run's failure, held to wheels, as what it may be: a source to build."""
    if " dry run failed " not in exc.message:
        return exc
    return UsageError(exc.message, hint=exc.hint or f"the dry run ran with building off; {hint()}")


def hint() -> str:
    return (
        f"if it has to build a package (a local project, an sdist), {ALLOW} lets the preview"
        " run its build backend (with your rights); or build a wheel first and install that"
    )
