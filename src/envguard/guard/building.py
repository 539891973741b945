"""No build code before the decision: a preview that would run a build backend (a local
project, an sdist, a VCS checkout, an in-tree backend) says so and refuses, unless the user
gave ``--allow-build``.

Reading a source's metadata runs its build backend, with the user's rights: it can write
into the venv before guard has decided anything. uv is told not to build (``--no-build``:
it still reads a project's static metadata from pyproject.toml, and fails where it would
have to build); pip builds a local folder or archive even under ``--only-binary :all:``,
so what a pip command or its requirements files name is read first, and the dry run is
held to wheels for the rest (an sdist on the index). The install itself, once decided,
builds as it always would."""

from __future__ import annotations

from dataclasses import replace

from envguard.errors import UsageError
from envguard.guard.command import InstallCommand

ALLOW = "--allow-build"


def without_builds(command: InstallCommand) -> InstallCommand:
    """``command`` as its dry run runs it: nothing built (last, so that it wins over the
    command's own --no-binary)."""
    held = ("--no-build",) if command.tool == "uv" else ("--only-binary=:all:",)
    return replace(command, args=(*command.args, *held))


def check_sources(command: InstallCommand, in_files: tuple[str, ...]) -> None:
    """UsageError when previewing a pip ``command`` would build a source it, or its
    requirements files (``in_files``), name."""
    if command.tool != "pip" or command.action == "uninstall":
        return
    named = [*command.sources, *in_files]
    if named:
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
