"""PEP 751 pylock.toml, read by packaging's own implementation of the spec (``packaging.pylock``):
validation, ``requires-python``, ``environments``, and every marker evaluated with the
selected extras and dependency groups."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name

from envguard.compare.lockfiles.common import (
    MARKER_ERRORS,
    LockfileError,
    LockRead,
    Pin,
    every_environment,
    merged,
    package_lines,
    parse_toml,
    reason,
)
from envguard.compare.selection import Selection

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from packaging.markers import Marker
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
    text: str, *, where: str, base: Path, env: dict[str, str] | None, selection: Selection
) -> dict[str, Pin]:
    """The packages a PEP 751 installer would pick from ``text`` for ``env``."""
    return read_pylock(text, where=where, base=base, env=env, selection=selection).pins


def read_pylock(
    text: str, *, where: str, base: Path, env: dict[str, str] | None, selection: Selection
) -> LockRead:
    """What a PEP 751 installer would pick from ``text`` for ``env`` and the selection, and
    what it holds but would not pick, with why. ``env`` None: for every environment of the
    lock's own ``requires-python`` (a lock change), each pin's markers kept as its scope."""
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
    lines = package_lines(text, "[[packages]]")
    extras: set[str] = set(lock.extras or ()) if selection.all_extras else set(selection.extras)
    groups: set[str] | None = None
    if selection.only_groups:
        groups = set(selection.only_groups)
    elif selection.all_groups:
        groups = set(lock.dependency_groups or ())
    elif selection.groups or selection.no_default_groups:
        groups = set(selection.groups) | (
            set() if selection.no_default_groups else set(lock.default_groups or ())
        )
    _check_declared(lock, extras, groups, where=where)
    chosen_groups = set(lock.default_groups or ()) if groups is None else groups
    all_groups = {*(lock.dependency_groups or ()), *(lock.default_groups or ())}
    envs = [env] if env is not None else every_environment(_text(lock.requires_python))
    if env is not None:
        _check_covers(lock, {k: v for k, v in env.items() if k != "extra"}, where=where)
    pins: dict[str, Pin] = {}
    if env is not None:
        try:
            chosen = list(
                lock.select(
                    environment={k: v for k, v in env.items() if k != "extra"},  # type: ignore[arg-type]
                    tags=_tags_of(lock),
                    extras=extras,
                    dependency_groups=groups,
                    prefer_sdist_predicate=lambda _name: True,
                )
            )
        except PylockSelectError as exc:
            raise LockfileError(f"{where}: {reason(exc)}") from None
        except MARKER_ERRORS as exc:  # a marker that does not evaluate in this environment
            raise LockfileError(
                f"{where}: a marker envguard cannot evaluate ({reason(exc)})"
            ) from None
        for package, dist in chosen:
            name = canonicalize_name(package.name)
            scope = _options(package.marker)
            pins[name] = replace(_pin(name, package, dist, base, lines.get(name)), scope=scope)
    aside: dict[str, Pin] = {}
    elsewhere: dict[str, tuple[str, str]] = {}
    requires: dict[str, set[str]] = {}
    wanted = _prepared(envs, extras, chosen_groups)
    everything = _prepared(envs, set(lock.extras or ()), all_groups)
    judged: dict[str, tuple[bool, bool, tuple[str, ...]]] = {}

    def judge(marker: Marker | None) -> tuple[bool, bool, tuple[str, ...]]:
        """Selected here, selected with everything, the scope: once per distinct marker."""
        key = str(marker)
        if key not in judged:
            judged[key] = (
                _holds(marker, wanted, where=where),
                _holds(marker, everything, where=where),
                _options(marker) + _platform(marker, everything, where=where),
            )
        return judged[key]

    for package in lock.packages:
        name = canonicalize_name(package.name)
        for dep in package.dependencies or ():
            if isinstance(dep.get("name"), str):
                requires.setdefault(name, set()).add(canonicalize_name(dep["name"]))
        if env is not None and name in pins:
            continue
        here, anywhere, scope = judge(package.marker)
        source = package.vcs or package.directory or package.archive
        pin = replace(_pin(name, package, source, base, lines.get(name)), scope=scope)
        if here:  # for one interpreter, packaging's select() has said which are installed
            if env is None:
                pins[name] = merged(pins.get(name), pin)
        elif name not in pins:
            aside[name] = merged(aside.get(name), pin)
            if anywhere:
                options = _options(package.marker)
                flags = " or ".join(f"--{o}" for o in options)
                labels = " or ".join(f"{o.split()[0]} `{o.split()[1]}`" for o in options)
                elsewhere[name] = ("selection", f"only in {labels}, not selected: add {flags}")
            else:
                elsewhere[name] = ("platform", str(package.marker))
    return LockRead(
        pins=pins,
        aside={n: p for n, p in aside.items() if n not in pins},
        elsewhere={n: w for n, w in elsewhere.items() if n not in pins},
        requires={n: frozenset(t) for n, t in requires.items()},
    )


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _check_declared(lock: Pylock, extras: set[str], groups: set[str] | None, *, where: str) -> None:
    """The extras and groups asked for are ones the lock declares: PEP 751's rule, said
    with a hint when uv already applied the selection at export."""
    declared_groups = {*(lock.dependency_groups or ()), *(lock.default_groups or ())}
    unknown: list[tuple[str, list[str], set[str]]] = [
        ("Undeclared extras", sorted(canonicalize_name(e) for e in extras), set(lock.extras or ())),
        (
            "Undeclared dependency groups",
            sorted(canonicalize_name(g) for g in groups or ()),
            declared_groups,
        ),
    ]
    for what, asked, declared in unknown:
        missing = [a for a in asked if a not in {canonicalize_name(d) for d in declared}]
        if missing:
            # uv exports one selection (`uv export --extra cpu`) and declares none: the extras
            # and groups it applied are not in the file to select again.
            raise LockfileError(
                f"{where}: {what}: {', '.join(missing)}",
                hint="uv applied the selection when it exported this pylock.toml:"
                " drop --extra/--group here"
                if lock.created_by == "uv"
                else None,
            )


Prepared = list[dict[str, "str | AbstractSet[str]"]]


def _prepared(envs: list[dict[str, str]], extras: set[str], groups: set[str]) -> Prepared:
    """``envs`` ready for PEP 751 markers with these extras and dependency groups, made
    once per lock (not once per package: a lock may hold thousands)."""
    from packaging.markers import prepare_environment

    sets = {
        "extras": frozenset(canonicalize_name(e) for e in extras),
        "dependency_groups": frozenset(canonicalize_name(g) for g in groups),
    }
    return [
        prepare_environment(
            {**{k: v for k, v in env.items() if k != "extra"}, **sets}, context="lock_file"
        )
        for env in envs
    ]


def _holds(marker: Marker | None, envs: Prepared, *, where: str) -> bool:
    """Whether ``marker`` is true in one of ``envs``."""
    if marker is None:
        return True
    try:
        return any(marker.evaluate_prepared(env) for env in envs)
    except MARKER_ERRORS as exc:
        raise LockfileError(f"{where}: a marker envguard cannot evaluate ({reason(exc)})") from None


def _options(marker: Marker | None) -> tuple[str, ...]:
    """The extras and groups a PEP 751 marker names (``'gpu' in extras``): "extra gpu"."""
    import re

    if marker is None:
        return ()
    text = str(marker)
    found = [f"extra {m}" for m in re.findall(r"['\"]([^'\"]+)['\"]\s+in\s+extras\b", text)]
    found += [
        f"group {m}" for m in re.findall(r"['\"]([^'\"]+)['\"]\s+in\s+dependency_groups\b", text)
    ]
    return tuple(dict.fromkeys(found))


def _platform(marker: Marker | None, envs: Prepared, *, where: str) -> tuple[str, ...]:
    """The marker itself, when it is false somewhere in ``envs`` (prepared with everything
    selected): the package is locked only for some platforms or Pythons."""
    if marker is None or all(_holds(marker, [env], where=where) for env in envs):
        return ()
    return (str(marker),)


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
        url = Path(path).as_uri()
        return Pin(name=name, version=version, url=url, line=line, kind="directory")
    if isinstance(dist, PackageVcs):
        url = f"{dist.type}+{dist.url or dist.path}@{dist.commit_id}"
        return Pin(name=name, version=version, url=url, line=line)
    if isinstance(dist, PackageArchive) and (dist.url or dist.path):
        url = dist.url or (base / str(dist.path)).resolve().as_uri()
        return Pin(name=name, version=version, url=url, line=line, kind="archive")
    return Pin(name=name, version=version, line=line)
