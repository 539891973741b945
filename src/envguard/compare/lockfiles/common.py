"""What every lockfile reader shares: the Pin, the error, marker evaluation, TOML."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker

from envguard.errors import UsageError
from envguard.reading import LOCKFILE_CAP, NotRegular, read_bytes
from envguard.snapshots.models import Snapshot
from envguard.toml_reading import toml_loads

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class LockfileError(UsageError):
    """A lockfile that does not parse: exit 2."""


@dataclass(frozen=True)
class Pin:
    """One package as a lockfile pins it."""

    name: str
    version: str | None = None  # exact pin
    specifier: str | None = None  # a non-exact requirement (requirements.txt only)
    url: str | None = None
    editable: str | None = None
    line: int | None = None  # where the lockfile pins it (1-based), for annotations
    # Where the lock installs it when not everywhere by default: "extra cpu", "group dev",
    # or an environment marker ("sys_platform == 'win32'"); read for a lock change.
    scope: tuple[str, ...] = ()
    # What ``url`` names, where it is a direct source: "archive" (a wheel or sdist, by URL
    # or path) or "directory" (a folder, installed not editable); None: an index or VCS.
    kind: str | None = None


@dataclass(frozen=True)
class LockRead:
    """A lockfile's pins for one interpreter, and what the reader wants the user to know
    (a fallback it used, lines it ignored)."""

    pins: dict[str, Pin]
    notes: tuple[str, ...] = ()
    # A uv.lock: `uv sync` is exact by default, so packages it does not list are drift.
    exact: bool = False
    # Why the lock no longer matches its pyproject.toml (`uv lock --check` fails), if it does.
    stale: str | None = None
    # Packages the lock holds but does not install for this selection and interpreter, and
    # why: ("selection", "only in group `lint`, not selected: add --group lint") or
    # ("platform", "sys_platform == 'win32'").
    elsewhere: dict[str, tuple[str, str]] = field(default_factory=dict)
    # The pins of those packages (the lock's version), for a lock change to compare.
    aside: dict[str, Pin] = field(default_factory=dict)
    # What requires what in the lock (a name -> the names its entry depends on), where the
    # format says: a lock change is folded under the package whose addition pulled in the rest.
    requires: dict[str, frozenset[str]] = field(default_factory=dict)


def merged(held: Pin | None, pin: Pin) -> Pin:
    """One pin for a name the lock lists more than once (one entry per platform or Python):
    its versions joined with "or", its scopes together."""
    if held is None:
        return pin
    version = (
        " or ".join(
            dict.fromkeys(v for p in (held, pin) for v in (p.version or "").split(" or ") if v)
        )
        or None
    )
    from dataclasses import replace

    return replace(
        held,
        version=version,
        url=held.url if held.url == pin.url else None,
        scope=tuple(dict.fromkeys(held.scope + pin.scope)),
    )


def package_lines(text: str, header: str) -> dict[str, int]:
    """Line of each ``name = "..."`` that follows ``header`` (``[[package]]`` in uv.lock,
    ``[[packages]]`` in pylock.toml), by canonical name: where an annotation points."""
    from packaging.utils import canonicalize_name

    lines: dict[str, int] = {}
    after = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped == header:
            after = True
            continue
        match = _NAME_LINE.match(stripped) if after else None
        if match:
            lines.setdefault(canonicalize_name(match.group(1)), number)
            after = False
    return lines


_NAME_LINE = re.compile(r'name\s*=\s*"([A-Za-z0-9._-]+)"\s*$')


def marker_env(snapshot: Snapshot | None) -> dict[str, str]:
    """PEP 508 marker values of the snapshot's interpreter (of this one without a snapshot:
    two lockfiles are compared for the machine that runs envguard)."""
    if snapshot is None:
        from packaging.markers import default_environment

        env = {k: str(v) for k, v in default_environment().items()}
        env.setdefault("extra", "")
        return env
    env = dict(snapshot.interpreter.markers)
    env.setdefault("python_full_version", snapshot.interpreter.version)
    env.setdefault("python_version", ".".join(snapshot.interpreter.version.split(".")[:2]))
    env.setdefault("extra", "")
    return env


# The platforms a lock is read for when no interpreter is named: (sys_platform,
# platform_system, os_name, platform_machine), the ones wheels are built for.
_PLATFORMS = (
    ("linux", "Linux", "posix", "x86_64"),
    ("linux", "Linux", "posix", "aarch64"),
    ("win32", "Windows", "nt", "AMD64"),
    ("darwin", "Darwin", "posix", "arm64"),
)
_MINORS = range(8, 20)


def every_environment(requires_python: str | None) -> list[dict[str, str]]:
    """Marker environments for every Python minor in the lock's ``requires_python`` (3.8 to
    3.19) on each platform wheels are built for: a lock change is read for the lock's own
    range, not for the interpreter running envguard. A range no minor satisfies (or that
    does not parse) gives all of them."""
    from packaging.markers import default_environment
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        wanted = SpecifierSet(requires_python or "")
    except InvalidSpecifier:
        wanted = SpecifierSet()
    minors = [m for m in _MINORS if wanted.contains(f"3.{m}.0", prereleases=True)]
    base = {k: str(v) for k, v in default_environment().items()}
    envs = []
    for minor in minors or list(_MINORS):
        for system, name, os_name, machine in _PLATFORMS:
            envs.append(
                {
                    **base,
                    "python_version": f"3.{minor}",
                    "python_full_version": f"3.{minor}.0",
                    "sys_platform": system,
                    "platform_system": name,
                    "os_name": os_name,
                    "platform_machine": machine,
                    "implementation_name": "cpython",
                    "platform_python_implementation": "CPython",
                    "extra": "",
                }
            )
    return envs


# What evaluating a marker from an untrusted file can raise: packaging's own errors
# (UndefinedEnvironmentName is a KeyError since packaging 26), and type errors on odd values.
MARKER_ERRORS = (InvalidMarker, ValueError, KeyError, TypeError, RecursionError)


def applies(marker: str | None, env: dict[str, str] | None, *, where: str) -> bool:
    """Whether ``marker`` holds in ``env`` (None: any environment; every marker does)."""
    if not marker or env is None:
        return True
    try:
        return Marker(marker).evaluate(env)
    except MARKER_ERRORS as exc:
        raise LockfileError(f"{where}: a marker envguard cannot evaluate ({reason(exc)})") from None


def marker_text(marker: str) -> str:
    """A marker as packaging writes it (``sys_platform == "win32"``), so that every reader
    names the same marker the same way; as written when it does not parse."""
    try:
        return str(Marker(marker))
    except MARKER_ERRORS:
        return marker


def reason(exc: Exception) -> str:
    """Why a parser refused some text, never the text itself: lockfiles come from pull
    requests, and packaging quotes its input (on later lines, and in quotes)."""
    lines = str(exc).splitlines()
    first = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", lines[0]) if lines else type(exc).__name__
    return first[:200]


def allowed_roots(path: Path, cwd: Path | None = None) -> tuple[str, ...]:
    """Where `-r` may lead: the top file's folder, the working directory, its work tree."""
    from envguard.snapshots.repos import find_work_tree

    cwd = Path.cwd() if cwd is None else cwd
    roots = {os.path.realpath(path.parent), os.path.realpath(cwd)}
    top = find_work_tree(cwd)
    if top is not None:
        roots.add(os.path.realpath(top))
    return tuple(sorted(roots))


def confined(path: Path, *, what: str) -> None:
    """Refuse ``path`` when it is a symlink whose target lies outside the project (the
    folder it is in, the working directory, its git work tree): a pull request can commit a
    symlink to a secret file. A path the user spelled outside the project is theirs."""
    resolved = os.path.realpath(path)
    if resolved == os.path.abspath(path):
        return
    lexical = Path(os.path.abspath(path))
    roots = allowed_roots(lexical.parent / lexical.name)
    if not any(resolved == r or resolved.startswith(r.rstrip("/") + "/") for r in roots):
        raise LockfileError(f"{what} {path}: a symlink leading outside the project; not read")


def read_lockfile_text(path: Path) -> str:
    """A lockfile's text: a regular file only (never a FIFO or /dev/...), capped, UTF-8.

    Lockfiles come from pull requests: errors name the file and the reason, never its
    contents."""
    try:
        data = read_bytes(str(path), LOCKFILE_CAP)
    except NotRegular:
        raise LockfileError(f"{path}: not a regular file") from None
    except FileNotFoundError:
        raise LockfileError(f"{path}: no such file") from None
    except OSError as exc:
        raise LockfileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return lockfile_text(data, where=str(path))


def lockfile_text(data: bytes, *, where: str) -> str:
    """A lockfile's bytes as text: UTF-8, and no NUL (no format allows one, and a path
    holding one is an error of every os call it reaches)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LockfileError(f"{where}: not UTF-8 text (bad byte at offset {exc.start})") from None
    if "\x00" in text:
        offset = text.index("\x00")
        raise LockfileError(f"{where}: not a text file (a NUL byte at offset {offset})")
    return text


def read_toml(path: Path) -> dict[str, Any]:
    return parse_toml(read_lockfile_text(path), where=str(path))


def parse_toml(text: str, *, where: str) -> dict[str, Any]:
    """TOML from a lockfile's text; one-line errors that quote nothing of it."""
    try:
        return toml_loads(text)
    except RecursionError:
        raise LockfileError(f"{where}: not valid TOML (nested too deeply)") from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message is "reason (at line N, column M)": it quotes no content.
        raise LockfileError(f"{where}: not valid TOML ({reason(exc)})") from None
    except ValueError as exc:  # a number the one reader refuses
        raise LockfileError(f"{where}: not valid TOML ({exc})") from None
