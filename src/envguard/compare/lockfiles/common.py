"""What every lockfile reader shares: the Pin, the error, marker evaluation, TOML."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker

from envguard.errors import UsageError
from envguard.reading import LOCKFILE_CAP, NotRegular, read_bytes
from envguard.snapshots.models import Snapshot

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


def marker_env(snapshot: Snapshot) -> dict[str, str]:
    env = dict(snapshot.interpreter.markers)
    env.setdefault("python_full_version", snapshot.interpreter.version)
    env.setdefault("python_version", ".".join(snapshot.interpreter.version.split(".")[:2]))
    env.setdefault("extra", "")
    return env


def applies(marker: str | None, env: dict[str, str], *, where: str) -> bool:
    if not marker:
        return True
    try:
        return Marker(marker).evaluate(env)
    except (InvalidMarker, ValueError) as exc:  # UndefinedEnvironmentName is a ValueError
        raise LockfileError(f"{where}: a marker envguard cannot evaluate ({reason(exc)})") from None


def reason(exc: Exception) -> str:
    """Why a parser refused some text, never the text itself: lockfiles come from pull
    requests, and packaging quotes its input (on later lines, and in quotes)."""
    lines = str(exc).splitlines()
    first = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", lines[0]) if lines else type(exc).__name__
    return first[:200]


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
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LockfileError(f"{path}: not UTF-8 text (bad byte at offset {exc.start})") from None


def read_toml(path: Path) -> dict[str, Any]:
    text = read_lockfile_text(path)
    try:
        data: dict[str, Any] = tomllib.loads(text)
        return data
    except RecursionError:
        raise LockfileError(f"{path}: not valid TOML (nested too deeply)") from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message is "reason (at line N, column M)": it quotes no content.
        raise LockfileError(f"{path}: not valid TOML ({exc})") from None
