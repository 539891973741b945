"""Where the installer will write: the settings pip and uv take from their configuration
files and variables, read as they read them, held to the guarded venv before anything runs.

The dry run is told the venv (``--python``), the install is not: it runs as the user typed
it, so a configuration file or a variable that names another interpreter, a ``target``, a
``prefix``, a ``root`` or the user's site would make it write where the preview never
looked. pip is asked itself (``pip config debug``: every file at every level, in the order
and with the names pip uses); its ``PIP_*`` variables are read by pip's own rule (any case
after the prefix, ``_`` for ``-``, leading ``--`` dropped: ``PIP___TARGET`` is ``target``).
uv has no such command: its files are found as uv finds them (``--config-file`` or
``UV_CONFIG_FILE`` alone; else the nearest ``uv.toml`` or ``pyproject.toml`` with
``[tool.uv]`` from the working folder up, the user's and the system's ``uv.toml``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envguard.errors import UsageError
from envguard.guard.command import InstallCommand, read_confined
from envguard.guard.reqfile import pip_name

# pip's options that send an install elsewhere than the venv whose pip runs.
_PIP_TARGETS = ("target", "prefix", "root", "user", "python")
# uv's (the `[pip]` table of uv.toml, `[tool.uv.pip]` of pyproject.toml).
_UV_TARGETS = ("python", "system", "target", "prefix")
# The levels `pip config debug` prints, each once (the variables, then the files).
_PIP_LEVELS = frozenset({"env_var", "env", "global", "site", "user"})
# pip's boolean spellings (its strtobool).
_FALSE = ("n", "no", "f", "false", "off", "0", "")


@dataclass(frozen=True)
class Setting:
    """One installer setting and where it comes from."""

    source: str  # "pip config file /etc/pip.conf", "PIP_target", "uv config file ./uv.toml"
    name: str  # the option's long name, as pip and uv spell it: "target", "python", ...
    value: str
    section: str = ""  # pip: the config file's section ("global", "install"); "" for all


def pip_variables(env: Mapping[str, str]) -> list[Setting]:
    """Each ``PIP_*`` variable as the setting pip reads from it."""
    return [
        Setting(source=key, name=pip_name(key), value=value)
        for key, value in sorted(env.items())
        if key.startswith("PIP_")
    ]


def pip_files(python: Path, env: Mapping[str, str], *, timeout: float) -> list[Setting]:
    """Every setting in pip's configuration files, as the venv's pip finds them (asked
    with ``pip config debug``, bounded by ``timeout``)."""
    import time

    from envguard.guard.resolve import read_output, start_reading

    chosen = env.get("PIP_CONFIG_FILE")
    if chosen == os.devnull:
        # pip then reads no configuration file at all, its own nor the user's nor the
        # system's (pip/_internal/configuration.py, _load_config_files): nor does guard
        # (`pip config debug` still lists /dev/null as a file that exists).
        return []
    if chosen and os.path.lexists(chosen):
        read_confined(Path(chosen), label=f"PIP_CONFIG_FILE {chosen}", what="pip config file")
    quiet = {**env, "_PIP_RUNNING_IN_SUBPROCESS": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    argv = [str(python), "-m", "pip", "config", "debug"]
    proc = start_reading(argv, quiet)
    try:
        out = read_output(proc, time.monotonic() + timeout, timeout=timeout, label="pip config")
    except UsageError as exc:
        if "did not finish" in exc.message:
            raise
        # pip quotes a file it cannot parse: never shown (a pip.conf linked to
        # /proc/self/environ would print the environment).
        raise UsageError(
            "the venv's pip could not read its configuration; nothing was installed",
            hint=f"{python} -m pip config debug says why",
        ) from None
    return _config_debug(out.decode("utf-8", "replace"))


def _config_debug(text: str) -> list[Setting]:
    """The settings in each file `pip config debug` names as existing, read from the file
    as pip reads it (configparser). Not from the values pip prints: a value over several
    lines (continuation lines in the file) prints as more lines in the same indent, where
    the first can show an empty value or the venv and the rest pass for other settings;
    pip then installs into a folder named by all of it."""
    found: dict[tuple[str, str, str], Setting] = {}
    for line in text.splitlines():
        if not line.startswith("  ") or line.startswith("   "):
            continue  # a level's header, a variable, a value: only files are read here
        path, _, exists = line.strip().rpartition(", exists: ")
        if exists != "True":
            continue
        for section, name, value in _pip_file(path):
            setting = Setting(
                source=f"pip config file {path}", name=name, value=value, section=section
            )
            found.setdefault((section, name, value), setting)
    return list(found.values())


def _pip_file(path: str) -> list[tuple[str, str, str]]:
    """(section, name, value) of a pip config file, read as pip reads it (names as pip
    normalises them); a value over several lines refuses the install (fail closed)."""
    import configparser

    parser = configparser.RawConfigParser()
    try:
        text = read_confined(Path(path), label=path, what="pip config file")
        parser.read_string(text, source=path)
    except configparser.Error:
        raise UsageError(
            f"{path}: pip's configuration there cannot be read; nothing was installed"
        ) from None
    found = []
    for section in parser.sections():
        for name, value in parser.items(section):
            if "\n" in value:
                raise UsageError(
                    f"{path}: a pip config file holds a value over several lines ({name}),"
                    " which envguard guard cannot hold to the venv; nothing was installed",
                    hint="put each value of pip's configuration on one line",
                )
            name = name.lower().replace("_", "-")
            found.append((section, name[2:] if name.startswith("--") else name, value))
    return found


def uv_files(command: InstallCommand, env: Mapping[str, str], *, cwd: Path) -> list[Setting]:
    """The uv settings that choose where `uv pip` installs, from every file uv reads."""
    chosen = _option(command.args, "--config-file") or env.get("UV_CONFIG_FILE")
    if chosen:
        files = [Path(chosen) if os.path.isabs(chosen) else cwd / chosen]
    elif "--no-config" in command.args or _truthy(env.get("UV_NO_CONFIG", "")):
        files = []
    else:
        files = [*_nearest(cwd), *_user_and_system(env)]
    settings: list[Setting] = []
    for path in files:
        table = _uv_table(path)
        settings += [
            Setting(
                source=f"uv config file {path}",
                name=key,
                value=str(table[key]).lower() if isinstance(table[key], bool) else str(table[key]),
            )
            for key in _UV_TARGETS
            if key in table
        ]
    return settings


def _option(args: tuple[str, ...], option: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == option and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(option + "="):
            return arg.partition("=")[2]
    return None


def _truthy(value: str) -> bool:
    return value.strip().lower() not in _FALSE


def _nearest(cwd: Path) -> list[Path]:
    """The project-level file: the first folder from ``cwd`` up with a uv.toml, or a
    pyproject.toml with a [tool.uv] table (uv.toml first, as uv reads them)."""
    for folder in (cwd, *cwd.parents):
        if (folder / "uv.toml").is_file():
            return [folder / "uv.toml"]
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "tool" in (data := _toml(pyproject)):
            tool = data["tool"]
            if isinstance(tool, dict) and "uv" in tool:
                return [pyproject]
    return []


def _user_and_system(env: Mapping[str, str]) -> list[Path]:
    home = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME", "~"), ".config")
    found = [Path(home).expanduser() / "uv" / "uv.toml"]
    dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
    system = [Path(d) / "uv" / "uv.toml" for d in dirs if d] + [Path("/etc/uv/uv.toml")]
    found += [p for p in system if p.is_file()][:1]
    return [p for p in found if p.is_file()]


def _uv_table(path: Path) -> dict[str, object]:
    data = _toml(path)
    if path.name == "pyproject.toml":
        data = _table(_table(data.get("tool")).get("uv"))
    return _table(data.get("pip"))


def _table(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _toml(path: Path) -> dict[str, object]:
    """A uv config file's TOML, read as a requirements file is (a regular file inside
    reach, never under /proc or /dev, capped; errors that quote nothing of it)."""
    from envguard.compare.lockfiles.common import parse_toml

    text = read_confined(path, label=str(path), what="uv config file")
    return dict(parse_toml(text, where=str(path)))


def names_venv(value: str, venv: Path, *, cwd: Path) -> bool:
    """``value`` (an interpreter or a folder, as an option or a setting gives it) is the
    guarded venv: its folder, or an interpreter in its bin/ (not followed: bin/python is
    a link to the base interpreter)."""
    path = Path(value).expanduser()
    path = path if path.is_absolute() else cwd / path
    try:
        if path.is_dir():
            return os.path.samefile(path, venv)
        return path.name.startswith("python") and os.path.samefile(path.parent, venv / "bin")
    except OSError:
        return False


def check(
    settings: list[Setting],
    *,
    tool: str,
    action: str,
    venv: Path,
    cwd: Path,
    python_given: bool = False,
) -> None:
    """UsageError naming the first setting that sends the install elsewhere than ``venv``.
    ``python_given``: the command names the interpreter itself (the guarded venv's), which
    wins over a setting's."""
    for s in settings:
        if s.section not in ("", "global", action) or not s.value.strip():
            continue
        if python_given and s.name in ("python", "system"):
            continue
        if tool == "pip" and (
            s.name not in _PIP_TARGETS or (action == "uninstall" and s.name != "python")
        ):
            continue
        if tool == "uv" and s.name not in _UV_TARGETS:
            continue
        if s.name in ("user", "system") and not _truthy(s.value):
            continue
        if s.name in ("python", "prefix") and names_venv(s.value, venv, cwd=cwd):
            continue
        raise UsageError(
            f"{s.source} sets {s.name}={s.value}, which is not the guarded venv {venv}",
            hint=f"remove it (or point it at {venv}), or run the command without the guard",
        )


def file_settings(settings: list[Setting], *, action: str) -> list[str]:
    """The requirements and constraints files pip's settings name (pip reads them as if
    given -r and -c)."""
    return [
        name
        for s in settings
        if s.name in ("requirement", "constraint") and s.section in ("", "global", action)
        for name in s.value.split()
    ]


def guard_target(
    command: InstallCommand,
    *,
    venv: Path,
    env: Mapping[str, str],
    installer: Mapping[str, str],
    cwd: Path,
    timeout: float,
) -> list[str]:
    """Refuse a ``command`` whose installer's settings send it elsewhere than ``venv``;
    the requirements files its settings name besides (checked as -r files are). ``env``:
    the user's environment; ``installer``: the one the install runs in."""
    for value in command.pythons:
        if not names_venv(value, venv, cwd=cwd):
            raise UsageError(
                f"--python {value}: the command installs into another interpreter's"
                f" environment than the guarded venv {venv}",
                hint="guard that venv instead: envguard guard --venv DIR -- "
                + " ".join(command.argv[:3])
                + " ...",
            )
    given = bool(command.pythons)
    if command.tool == "uv":
        found = uv_files(command, env, cwd=cwd)
        check(found, tool="uv", action=command.action, venv=venv, cwd=cwd, python_given=given)
        return []
    settings = pip_variables(env)
    check(settings, tool="pip", action=command.action, venv=venv, cwd=cwd, python_given=given)
    settings += pip_files(venv / "bin" / "python", installer, timeout=timeout)
    check(settings, tool="pip", action=command.action, venv=venv, cwd=cwd, python_given=given)
    return file_settings(settings, action=command.action)
