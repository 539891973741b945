"""The uv settings a lock check must see: the resolver settings uv records in uv.lock
(``exclude-newer``, ``resolution``, ``prerelease``, indexes, ...) as the user's uv would read
them, and nothing else.

uv runs with ``--no-config --config-file FILE``, FILE holding only these settings: a uv.lock
is checked with the settings it was locked with (so `uv lock --check` agrees with the
user's own), while the rest of a project's configuration (it may come from a pull request)
never reaches uv: ``cache-dir``, ``python-preference``, ``keyring-provider``, build
settings, and the ``.python-version`` file, which uv would otherwise run as an interpreter
(a path in it is executed). Where uv would read settings: the project's ``uv.toml``, else
its pyproject.toml ``[tool.uv]``; then the user's and the system's ``uv.toml`` (the user's
own files, read as uv reads them, so that the gate says what `uv lock --check` says on the
same machine); ``UV_CONFIG_FILE`` instead of all of them, ``UV_NO_CONFIG`` for none."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envguard.compare.lockfiles.common import LockfileError, confined, read_toml

# What uv compares between its settings and a lock's record (its [options] and indexes):
# these decide whether `uv lock --check` passes. Nothing here names a program, a writable
# folder, or a build step.
RESOLVER_KEYS = (
    "exclude-newer",
    "exclude-newer-package",
    "resolution",
    "prerelease",
    "fork-strategy",
    "index",
    "index-url",
    "extra-index-url",
    "find-links",
    "no-index",
    "index-strategy",
    "dependency-metadata",
    "no-sources",
)
# Lists uv joins across files (the project's entries first); any other key: the nearer wins.
_JOINED = frozenset({"index", "extra-index-url", "find-links", "dependency-metadata"})


def resolver_settings(project: Path, environ: Mapping[str, str]) -> dict[str, Any]:
    """The resolver settings uv would apply to ``project`` (see the module's docstring)."""
    if _truthy(environ.get("UV_NO_CONFIG")):
        return {}
    if environ.get("UV_CONFIG_FILE"):
        files: list[dict[str, Any]] = [_read(Path(environ["UV_CONFIG_FILE"]), table=None)]
    else:
        files = [_project(project), *(_read(p, table=None) for p in _user_files(environ))]
    merged: dict[str, Any] = {}
    for settings in files:  # nearest first
        for key in RESOLVER_KEYS:
            if key not in settings:
                continue
            if key in _JOINED and isinstance(settings[key], list):
                merged[key] = [*merged.get(key, []), *settings[key]]
            else:
                merged.setdefault(key, settings[key])
    return merged


def settings_toml(settings: Mapping[str, Any]) -> str:
    """``settings`` as a uv.toml: JSON's string escapes are TOML's, so each value is written
    as JSON, tables inline."""
    return "".join(f"{json.dumps(key)} = {_value(value)}\n" for key, value in settings.items())


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{json.dumps(str(k))} = {_value(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    # A TOML date or time: uv takes none of these settings as one; written as its text.
    return json.dumps(str(value))


def _project(project: Path) -> dict[str, Any]:
    """The project's own settings: its uv.toml when there is one (uv ignores [tool.uv]
    then), else pyproject.toml's [tool.uv]."""
    uv_toml = project / "uv.toml"
    if uv_toml.is_file():
        confined(uv_toml, what="uv.toml beside the lock")
        return _read(uv_toml, table=None)
    pyproject = project / "pyproject.toml"
    return _read(pyproject, table=("tool", "uv"))


def _read(path: Path, *, table: tuple[str, ...] | None) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data: Any = read_toml(path)
    for key in table or ():
        data = data.get(key) if isinstance(data, dict) else None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise LockfileError(f"{path}: [{'.'.join(table or ())}] is not a table")
    return data


def _user_files(environ: Mapping[str, str]) -> list[Path]:
    """The user's uv.toml, then the system's, where uv looks for them on Linux and macOS."""
    home = environ.get("HOME")
    config = environ.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else None)
    found = [Path(config) / "uv" / "uv.toml"] if config and os.path.isabs(config) else []
    dirs = environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    system = [Path(d) / "uv" / "uv.toml" for d in dirs.split(":") if os.path.isabs(d)]
    system.append(Path("/etc/uv/uv.toml"))
    first_system = next((p for p in system if p.is_file()), None)
    return found + ([first_system] if first_system is not None else [])


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")
