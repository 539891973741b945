"""What every lockfile reader shares: the Pin, the error, marker evaluation, TOML."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker

from envguard.errors import UsageError
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
    except InvalidMarker as exc:
        raise LockfileError(f"{where}: invalid marker {marker!r} ({exc})") from None


def read_toml(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
        return data
    except OSError as exc:
        raise LockfileError(f"{path}: cannot read ({exc.strerror})") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LockfileError(f"{path}: not valid TOML ({exc})") from None
