"""An install command as `envguard guard` takes it: which installer, what it asks for, the
files it reads, and the dry run that previews it. Nothing here runs anything."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from envguard.errors import UsageError

Tool = Literal["uv", "pip"]
Action = Literal["install", "uninstall", "sync", "add", "remove"]
# uv's project commands: they edit pyproject.toml and uv.lock, then sync the project's
# environment (`uv add` leaves packages it does not need, `uv remove` and `uv sync` do not).
PROJECT_ACTIONS: tuple[Action, ...] = ("add", "remove", "sync")

# Shell syntax in a command given as one string: it would need a shell to mean anything.
_SHELL = re.compile(r"[|&;<>`]|\$\(|\$\{|\n")

# Options that take a value (pip's and uv's install and uninstall), so that the value is
# not read as a package. The files they name are read by the resolver: checked first.
_FILE_OPTIONS = {
    "-r",
    "--requirement",
    "--requirements",
    "-c",
    "--constraint",
    "--constraints",
    "--override",
    "--overrides",
    "-b",
    "--build-constraint",
    "--build-constraints",
    "--excludes",
}
# Options that say where packages come from (an index, a folder of wheels, its transport):
# what the guard passes on when it asks the installer which files an install takes.
SOURCE_OPTIONS = frozenset(
    {
        "-i",
        "--index-url",
        "--index",
        "--default-index",
        "--extra-index-url",
        "-f",
        "--find-links",
        "--index-strategy",
        "--keyring-provider",
        "--prerelease",
        "--exclude-newer",
        "--only-binary",
        "--no-binary",
        "--torch-backend",
        "--allow-insecure-host",
        "--trusted-host",
        "--cache-dir",
        "--cert",
        "--client-cert",
        "--proxy",
        "--retries",
        "--timeout",
        "--default-timeout",
    }
)
_VALUE_OPTIONS = (
    _FILE_OPTIONS
    | SOURCE_OPTIONS
    | {
        "-e",
        "--editable",
        "--resolution",
        "--fork-strategy",
        "--no-build-package",
        "--python-version",
        "--python-platform",
        "--platform",
        "--implementation",
        "--abi",
        "-P",
        "--upgrade-package",
        "--reinstall-package",
        "--refresh-package",
        "--link-mode",
        "-C",
        "--config-setting",
        "--config-settings",
        "--color",
        "--config-file",
        "--upgrade-strategy",
        "--progress-bar",
        "--src",
        "--global-option",
        "--root-user-action",
        "--log",
        "--exists-action",
        "--extra",
        "--group",
        "--no-build-isolation-package",
        "--log-file",
        # uv add, remove and sync
        "--optional",
        "--bounds",
        "--tag",
        "--branch",
        "--rev",
        "--marker",
        "-m",
        "--package",
        "--no-extra",
        "--only-group",
        "--no-group",
        "--no-install-package",
        "--config-settings-package",
        "--exclude-newer-package",
        "--no-binary-package",
        "--no-editable-package",
        "--no-sources-package",
        "--prerelease-package",
        "--upgrade-group",
        # pip's
        "--local-log",
        "--pypi-url",
        "--source",
        "--source-dir",
        "--source-directory",
        "--use-deprecated",
        "--use-feature",
    }
)
# pip's flags that begin another option's name: pip reads them as themselves.
_PIP_FLAGS = {"--pre", "--upgrade", "--no-build-isolation"}
# Options that point the install at another place than the guarded venv, or that change
# what the dry run itself reports: refused, guard previews the venv it guards.
_RETARGETING = {
    "-p",
    "--python",
    "--system",
    "-t",
    "--target",
    "--prefix",
    "--root",
    "--user",
    "--report",
    "--dry-run",
    "--directory",
    "--project",
    "--script",
    "--output-format",
}


@dataclass(frozen=True)
class InstallCommand:
    """An install (or uninstall) command, as given, and what envguard read from it."""

    argv: tuple[str, ...]
    tool: Tool
    action: Action
    # The arguments after ``install``/``uninstall``: what the dry run passes on.
    args: tuple[str, ...]
    # Canonical names of the packages named on the command line (not those in -r files).
    requested: tuple[str, ...]
    files: tuple[str, ...]
    # `uv add|remove|sync`: the project's environment is what changes.
    project: bool = False
    # The interpreters the command names with --python (guard.target holds them to the
    # guarded venv); the option is not in ``args``: the dry run names the venv itself.
    pythons: tuple[str, ...] = ()
    # What the command names that would be built (a local project, an sdist, a VCS URL).
    sources: tuple[str, ...] = ()

    def label(self) -> str:
        import shlex

        return shlex.join(self.argv)


def split_guarded(text: str, *, shell: bool) -> tuple[str, ...]:
    """A command given as one string: shell syntax is refused unless ``shell`` (then it is
    split as the shell would split words; it still never runs through a shell)."""
    from envguard.tools import split_command

    if not shell and _SHELL.search(text):
        raise UsageError(
            f"the install command {text!r} holds shell syntax (| & ; < > ` $( );"
            " envguard runs one command, never a shell",
            hint="give the command after --, as separate words; --shell to split it anyway",
        )
    return split_command(text, option="the install command")


def parse(argv: tuple[str, ...]) -> InstallCommand:
    """What an install command asks for; UsageError for what guard cannot preview."""
    if not argv:
        raise UsageError(
            "no install command to guard", hint="envguard guard -- uv pip install PACKAGE"
        )
    program = os.path.basename(argv[0])
    rest = list(argv[1:])
    tool: Tool
    if program == "uv" or program.startswith("uv."):
        before, rest = _leading_options(rest)
        if rest[:1] and rest[0] in PROJECT_ACTIONS:
            project: Action = PROJECT_ACTIONS[PROJECT_ACTIONS.index(rest[0])]
            args = (*rest[1:], *before)
            requested, files = _read_args(args, tool="uv", action=project, project=True)
            return InstallCommand(
                argv=argv,
                tool="uv",
                action=project,
                args=args,
                requested=requested,
                files=files,
                project=True,
                sources=_sources(args) if project == "add" else (),
            )
        if rest[:1] != ["pip"]:
            raise UsageError(
                f"envguard guard previews `uv pip install|uninstall|sync` and `uv add|remove|"
                f"sync`, not `{' '.join(argv[:2])}`",
                hint="run other commands without the guard",
            )
        tool, rest = "uv", [*before, *rest[1:]]
    elif re.fullmatch(r"pip(3(\.\d+)?)?", program):
        tool = "pip"
    elif re.fullmatch(r"python(3(\.\d+)?)?", program) and rest[:2] == ["-m", "pip"]:
        tool, rest = "pip", rest[2:]
    else:
        raise UsageError(
            f"envguard guard does not know the installer {argv[0]!r}",
            hint="guard pip install, pip uninstall, python -m pip install or uv pip install",
        )
    actions: tuple[Action, ...] = (
        ("install", "uninstall", "sync") if tool == "uv" else ("install", "uninstall")
    )
    general, rest = _leading_options(rest)
    action = next((a for a in actions if rest[:1] == [a]), None)
    if action is None:
        raise UsageError(
            f"envguard guard previews {', '.join(actions)}, not {' '.join(argv)!r}",
            hint="run other commands without the guard",
        )
    args = (*rest[1:], *general)  # pip and uv take their general options after it too
    args, pythons = _take_python(args, tool=tool)
    requested, files = _read_args(args, tool=tool, action=action)
    return InstallCommand(
        argv=argv,
        tool=tool,
        action=action,
        args=args,
        requested=requested,
        files=files,
        pythons=pythons,
        sources=_sources(args),
    )


def _take_python(args: tuple[str, ...], *, tool: Tool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(``args`` without --python VALUE (and uv's -p), the values): an interpreter named
    there is judged against the guarded venv (guard.target), not refused by spelling."""
    spellings = ("--python", "-p") if tool == "uv" else ("--python",)
    kept: list[str] = []
    values: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        option, eq, value = arg.partition("=")
        if option in spellings and (eq or i + 1 < len(args)):
            if not eq:
                i += 1
                value = args[i]
            values.append(value)
        elif tool == "uv" and arg.startswith("-p") and not arg.startswith("--") and len(arg) > 2:
            values.append(arg[2:])  # uv's -pVALUE
        else:
            kept.append(arg)
        i += 1
    return tuple(kept), tuple(values)


def _sources(args: tuple[str, ...]) -> tuple[str, ...]:
    """What the command names that installing would build: editables, and arguments that
    are a folder, an archive or a URL rather than a name (guard.reqfile decides)."""
    from envguard.guard.reqfile import needs_build

    found: list[str] = []
    i = 0
    while i < len(args):
        option, eq, value = args[i].partition("=")
        if option in ("-e", "--editable"):
            if not eq and i + 1 < len(args):
                i += 1
                value = args[i]
            found.append(value)
        elif args[i].startswith("-e") and not args[i].startswith("--"):
            found.append(args[i][2:])
        elif option in _VALUE_OPTIONS and not eq:
            i += 1  # the option's value
        elif not args[i].startswith("-") and needs_build(args[i]):
            found.append(args[i])
        i += 1
    return tuple(found)


def _leading_options(words: list[str]) -> tuple[list[str], list[str]]:
    """(the options before the first word that is not one, or an option's value; the
    rest): ``pip -v --log x install six`` is (["-v", "--log", "x"], ["install", "six"])."""
    i = 0
    while i < len(words) and words[i].startswith("-"):
        option = words[i].partition("=")[0]
        takes_value = option in _VALUE_OPTIONS or option in ("--python", "-p")
        i += 2 if takes_value and "=" not in words[i] else 1
    return words[:i], words[i:]


def _read_args(
    args: tuple[str, ...], *, tool: Tool, action: Action, project: bool = False
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    requested: list[str] = []
    files: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        option, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        _check_option(option, tool=tool)
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
            i = _short_options(args, i, files, tool=tool)
        elif option in _VALUE_OPTIONS:
            i, value = _value(args, i, option, value if eq else None)
            if option in _FILE_OPTIONS:
                files.append(value)
        elif not arg.startswith("-") and action == "sync" and not project:
            files.append(arg)  # uv pip sync's arguments are requirements files
        elif not arg.startswith("-"):
            try:
                requested.append(canonicalize_name(Requirement(arg).name))
            except InvalidRequirement:
                if action in ("uninstall", "remove"):
                    raise UsageError(f"{arg!r}: not a package name") from None
                # A path or a URL: the resolver reads its name, the preview shows it.
        i += 1
    return tuple(dict.fromkeys(requested)), tuple(files)


def _check_option(option: str, *, tool: Tool) -> None:
    """UsageError for an option that points the install elsewhere, and for pip's
    abbreviations (``--targ`` is --target to pip): guard reads options as spelled."""
    if option in _RETARGETING:
        raise UsageError(
            f"{option}: envguard guard installs into the venv it guards, as previewed",
            hint=_retarget_hint(option, tool=tool),
        )
    if tool != "pip" or not option.startswith("--") or option in _PIP_FLAGS:
        return
    meant = sorted(o for o in _VALUE_OPTIONS | _RETARGETING if o.startswith(option) and o != option)
    if meant and option not in _VALUE_OPTIONS:
        raise UsageError(
            f"{option}: pip reads it as {' or '.join(meant)}; envguard guard reads options"
            " as spelled",
            hint="give the option in full",
        )


# Where each retargeting option sends an install (for the hint).
_ELSEWHERE = {
    "-t": "into a folder",
    "--target": "into a folder",
    "--prefix": "under another prefix",
    "--root": "under another root",
    "--user": "into your user site-packages",
    "--system": "into the system Python",
    "-p": "into another interpreter's environment",
    "--python": "into another interpreter's environment",
}


def _retarget_hint(option: str, *, tool: Tool) -> str:
    """What to do instead, in the words of the installer the user typed."""
    installer = "pip" if tool == "pip" else "uv"
    if option in _ELSEWHERE:
        return (
            f"drop {option} to install into the guarded venv; to install"
            f" {_ELSEWHERE[option]}, run the {installer} command without envguard guard"
        )
    if option in ("--report", "--dry-run", "--output-format"):
        return f"drop {option}: envguard guard --preview says what the install would change"
    return f"drop {option} and run envguard guard in the folder it names"


def _short_options(args: tuple[str, ...], i: int, files: list[str], *, tool: Tool) -> int:
    """Read ``args[i]``, short options run together as pip and uv take them (``-qr FILE``,
    ``-rFILE``, ``-Ut DIR``): the index of the last word it used (its value's, if apart)."""
    word = args[i]
    for k, letter in enumerate(word[1:], start=2):
        short = "-" + letter
        _check_option(short, tool=tool)
        if short in _VALUE_OPTIONS:
            i, value = _value(args, i, short, word[k:] or None)
            if short in _FILE_OPTIONS:
                files.append(value)
            break
    return i


def _value(args: tuple[str, ...], i: int, option: str, attached: str | None) -> tuple[int, str]:
    """(the index of the last word used, the value of ``option`` at ``args[i]``): the one
    ``attached`` to it, else the next word."""
    if attached is not None:
        return i, attached
    if i + 1 == len(args):
        raise UsageError(f"{option}: the install command lacks its value")
    return i + 1, args[i + 1]


_FORBIDDEN_ROOTS = ("/proc", "/dev", "/sys")


# Variables whose value names requirements files the installer reads as if given -r/-c.
FILE_VARIABLES = {
    "pip": ("PIP_REQUIREMENT", "PIP_CONSTRAINT"),
    "uv": ("UV_CONSTRAINT", "UV_OVERRIDE", "UV_BUILD_CONSTRAINT"),
}


# Variables that move uv to another folder or project (as --directory and --project would):
# the preview holds and checks the files of the folder it runs in.
_MOVING_VARIABLES = ("UV_WORKING_DIR", "UV_PROJECT")


def check_variables(command: InstallCommand, env: Mapping[str, str]) -> None:
    """UsageError when the environment points uv at another folder or project than the one
    the preview runs in (and whose files it puts back)."""
    if command.tool != "uv":
        return
    for variable in _MOVING_VARIABLES:
        if env.get(variable):
            raise UsageError(
                f"{variable} is set: envguard guard previews uv in the current folder,"
                " not in the one it names",
                hint=f"unset {variable} and run envguard guard in that folder",
            )


def check_files(command: InstallCommand, *, cwd: Path, env: Mapping[str, str]) -> tuple[str, ...]:
    """Each requirements or constraints file the command or its variables (PIP_REQUIREMENT
    in any spelling pip reads, UV_CONSTRAINT, ...) name, checked by check_named(); the
    sources to build they name."""
    from envguard.guard.reqfile import pip_name

    named = [*command.files]
    for variable, value in env.items():
        pip = command.tool == "pip" and variable.startswith("PIP_")
        if (pip and pip_name(variable) in ("requirement", "constraint")) or (
            variable in FILE_VARIABLES[command.tool]
        ):
            named += value.split()
    return check_named(named, cwd=cwd, env=env)


def check_named(named: list[str], *, cwd: Path, env: Mapping[str, str]) -> tuple[str, ...]:
    """Each requirements file in ``named``, and each file they include: a regular file
    inside reach, as ``check --lock`` reads one; never /proc, /dev or a FIFO. Returns the
    sources to build the files name (guard.building)."""
    from envguard.guard.reqfile import read_lines

    pending = [(cwd, f) for f in named]
    seen: set[str] = set()
    builds: list[str] = []
    while pending:
        base, name = pending.pop()
        name = _local_path(name)
        if "://" in name or name == os.devnull:
            continue  # the resolver fetches it; /dev/null is empty (guard sets it itself)
        if name in ("-", "/dev/stdin", "/proc/self/fd/0"):
            raise UsageError(
                f"{name}: requirements read from stdin cannot be previewed (the dry run"
                " would read them, then the install would find stdin empty)",
                hint="save them to a file and pass -r FILE",
            )
        path = Path(name) if os.path.isabs(name) else base / name
        text = read_confined(path, label=name)
        real = os.path.realpath(path)
        if real in seen or len(seen) > 256:
            continue
        seen.add(real)
        read = read_lines(text, env)
        # Named by its file, never quoted: an include can reach any file the user can
        # read (`-r ../../etc/shadow`), and a line of it is not a requirement to show.
        builds += [f"{name} (a line naming a source to build)" for _ in read.builds[:1]]
        pending += [(path.parent, m) for m in read.includes]
    return tuple(builds)


def _local_path(name: str) -> str:
    """A ``file:`` URL as the path the installer opens (pip and uv read them as files)."""
    from urllib.parse import unquote, urlsplit

    if not name.lower().startswith("file:"):
        return name
    parts = urlsplit(name)
    return unquote(parts.path) or name


def read_confined(path: Path, *, label: str, what: str = "requirements file") -> str:
    """The text of a file an installer would read (a requirements or config file), once it
    is known to be a regular file inside reach, not under /proc, /dev or /sys."""
    from envguard.compare.lockfiles.common import confined, read_lockfile_text

    real = os.path.realpath(path)
    if any(real == r or real.startswith(r + "/") for r in _FORBIDDEN_ROOTS):
        raise UsageError(f"{label}: a {what} in {real.split('/')[1]}/; not read")
    if not os.path.lexists(path):
        raise UsageError(f"{label}: no such {what}")
    confined(path, what=label)
    return read_lockfile_text(path)
