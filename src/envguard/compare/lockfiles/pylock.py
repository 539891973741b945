"""PEP 751 pylock.toml, read by packaging's own implementation of the spec (``packaging.pylock``):
validation, ``requires-python``, ``environments``, and every marker evaluated with the
selected extras and dependency groups."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name

from envguard.compare.lockfiles.common import (
    MARKER_ERRORS,
    LockfileError,
    Pin,
    package_lines,
    parse_toml,
    reason,
)
from envguard.compare.selection import Selection

if TYPE_CHECKING:
    from packaging.pylock import Pylock
    from packaging.tags import Tag


def _keys_kept(exc: Exception) -> str:
    """packaging's reason with the spec's key names kept (``'lock-version'``) and any other
    quoted text dropped, as reason() drops it."""
    import re

    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    keep = re.compile(r"[a-z][a-z0-9-]*(?:\[\d+\])?(?:\.[a-z][a-z0-9-]*(?:\[\d+\])?)*\Z")
    return re.sub(
        r"'([^']*)'|\"([^\"]*)\"",
        lambda m: m.group(0) if keep.match(m.group(1) or m.group(2) or "") else "'...'",
        first,
    )[:200]


class OutsideLock(LockfileError):
    """The interpreter is one the lock does not cover (``requires-python``, ``environments``):
    drift, not a bad lockfile."""


def read_pylock_text(
    text: str, *, where: str, base: Path, env: dict[str, str], selection: Selection
) -> dict[str, Pin]:
    """The packages a PEP 751 installer would pick from ``text`` for ``env``."""
    from packaging.pylock import (
        Pylock,
        PylockSelectError,
        PylockUnsupportedVersionError,
        PylockValidationError,
    )

    data = parse_toml(text, where=where)
    try:
        lock = Pylock.from_dict(data)
    except PylockUnsupportedVersionError as exc:
        raise LockfileError(
            f"{where}: a lock-version envguard cannot read ({reason(exc)})"
        ) from None
    except (PylockValidationError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise LockfileError(f"{where}: not a valid PEP 751 lock ({_keys_kept(exc)})") from None
    marker_env = {k: v for k, v in env.items() if k != "extra"}
    _check_covers(lock, marker_env, where=where)
    lines = package_lines(text, "[[packages]]")
    extras = set(lock.extras or ()) if selection.all_extras else set(selection.extras)
    groups: set[str] | None = None
    if selection.only_groups:
        groups = set(selection.only_groups)
    elif selection.all_groups:
        groups = set(lock.dependency_groups or ())
    elif selection.groups or selection.no_default_groups:
        groups = set(selection.groups) | (
            set() if selection.no_default_groups else set(lock.default_groups or ())
        )
    try:
        chosen = list(
            lock.select(
                environment=marker_env,  # type: ignore[arg-type]
                tags=_tags_of(lock),
                extras=extras,
                dependency_groups=groups,
                prefer_sdist_predicate=lambda _name: True,
            )
        )
    except PylockSelectError as exc:
        said = reason(exc)
        # uv exports one selection (`uv export --extra cpu`) and declares none: the extras
        # and groups it applied are not in the file to select again.
        exported = lock.created_by == "uv" and said.startswith(
            ("Undeclared extras", "Undeclared dependency groups")
        )
        raise LockfileError(
            f"{where}: {said}",
            hint="uv applied the selection when it exported this pylock.toml:"
            " drop --extra/--group here"
            if exported
            else None,
        ) from None
    except MARKER_ERRORS as exc:  # a marker that does not evaluate in this environment
        raise LockfileError(f"{where}: a marker envguard cannot evaluate ({reason(exc)})") from None
    pins: dict[str, Pin] = {}
    for package, dist in chosen:
        name = canonicalize_name(package.name)
        pins[name] = _pin(name, package, dist, base, lines.get(name))
    return pins


def _check_covers(lock: Pylock, env: dict[str, str], *, where: str) -> None:
    from packaging.markers import Marker
    from packaging.specifiers import SpecifierSet

    python = env.get("python_full_version", "")
    if lock.requires_python is not None and not SpecifierSet(str(lock.requires_python)).contains(
        python, prereleases=True
    ):
        raise OutsideLock(
            f"{where} requires Python {lock.requires_python}; the interpreter is {python}"
        )
    try:
        covered = not lock.environments or any(
            Marker(str(m)).evaluate(env) for m in lock.environments
        )
    except MARKER_ERRORS as exc:
        raise LockfileError(
            f"{where}: an environment envguard cannot evaluate ({reason(exc)})"
        ) from None
    if not covered:
        raise OutsideLock(f"{where}: none of its environments matches this interpreter")


def _tags_of(lock: Pylock) -> list[Tag]:
    """Every tag of every wheel in the lock: the gate compares versions, not wheel files, so
    no package may be dropped because its wheels do not fit the machine running envguard."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    tags: dict[Tag, None] = {}
    for package in lock.packages:
        for wheel in package.wheels or ():
            filename = wheel.name or str(wheel.url or wheel.path or "").rsplit("/", 1)[-1]
            try:
                tags.update(dict.fromkeys(parse_wheel_filename(filename)[3]))
            except InvalidWheelFilename:
                continue
    return list(tags)


def _pin(name: str, package: Any, dist: Any, base: Path, line: int | None) -> Pin:
    from packaging.pylock import PackageArchive, PackageDirectory, PackageVcs

    version = str(package.version) if package.version is not None else None
    if isinstance(dist, PackageDirectory):
        path = str((base / dist.path).resolve())
        if dist.editable:
            return Pin(name=name, editable=path, line=line)
        return Pin(name=name, version=version, url=Path(path).as_uri(), line=line)
    if isinstance(dist, PackageVcs):
        url = f"{dist.type}+{dist.url or dist.path}@{dist.commit_id}"
        return Pin(name=name, version=version, url=url, line=line)
    if isinstance(dist, PackageArchive) and dist.url:
        return Pin(name=name, version=version, url=dist.url, line=line)
    return Pin(name=name, version=version, line=line)
