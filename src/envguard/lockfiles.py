"""uv.lock, pylock.toml (PEP 751) and pinned requirements.txt readers, and the pin diff."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envguard.diff import sort_changes
from envguard.errors import UsageError
from envguard.models import Change, Drift, Severity, Snapshot
from envguard.policy import Policy

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


def _marker_env(snapshot: Snapshot) -> dict[str, str]:
    env = dict(snapshot.interpreter.markers)
    env.setdefault("python_full_version", snapshot.interpreter.version)
    env.setdefault("python_version", ".".join(snapshot.interpreter.version.split(".")[:2]))
    env.setdefault("extra", "")
    return env


def _applies(marker: str | None, env: dict[str, str], *, where: str) -> bool:
    if not marker:
        return True
    try:
        return Marker(marker).evaluate(env)
    except InvalidMarker as exc:
        raise LockfileError(f"{where}: invalid marker {marker!r} ({exc})") from None


def _toml(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
        return data
    except OSError as exc:
        raise LockfileError(f"{path}: cannot read ({exc.strerror})") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LockfileError(f"{path}: not valid TOML ({exc})") from None


def read_uv_lock(path: Path, env: dict[str, str]) -> dict[str, Pin]:
    """Packages uv would install for this interpreter: a walk from the workspace roots."""
    data = _toml(path)
    packages = data.get("package")
    if not isinstance(packages, list):
        raise LockfileError(f"{path}: no [[package]] entries (is it a uv.lock?)")
    by_name: dict[str, list[dict[str, Any]]] = {}
    for pkg in packages:
        if not isinstance(pkg, dict) or not isinstance(pkg.get("name"), str):
            raise LockfileError(f"{path}: a [[package]] entry has no name")
        by_name.setdefault(canonicalize_name(pkg["name"]), []).append(pkg)

    def pick(name: str, version: str | None) -> dict[str, Any] | None:
        candidates = by_name.get(name, [])
        if version is not None:
            candidates = [c for c in candidates if c.get("version") == version] or candidates
        for cand in candidates:
            markers = cand.get("resolution-markers")
            if not markers or any(_applies(m, env, where=str(path)) for m in markers):
                return cand
        return candidates[0] if candidates else None

    # Workspace members (editable or virtual) are the roots; uv sync adds the dev group.
    roots = [
        p
        for p in packages
        if isinstance(p.get("source"), dict)
        and ("editable" in p["source"] or "virtual" in p["source"])
    ]
    pins: dict[str, Pin] = {}
    seen: set[tuple[str, str | None, tuple[str, ...]]] = set()
    stack: list[tuple[dict[str, Any], tuple[str, ...], bool]] = [(r, (), True) for r in roots]
    while stack:
        pkg, extras, is_root = stack.pop()
        name = canonicalize_name(pkg["name"])
        key = (name, pkg.get("version"), extras)
        if key in seen:
            continue
        seen.add(key)
        source: dict[str, Any] = pkg["source"] if isinstance(pkg.get("source"), dict) else {}
        if "virtual" not in source:
            pins[name] = _uv_pin(name, pkg, source, path)
        edges = list(pkg.get("dependencies", []))
        for extra in extras:
            edges += pkg.get("optional-dependencies", {}).get(extra, [])
        if is_root:
            edges += pkg.get("dev-dependencies", {}).get("dev", [])
        for edge in edges:
            if not isinstance(edge, dict) or not isinstance(edge.get("name"), str):
                raise LockfileError(f"{path}: {pkg['name']}: a dependency has no name")
            if not _applies(edge.get("marker"), env, where=str(path)):
                continue
            target = pick(canonicalize_name(edge["name"]), edge.get("version"))
            if target is not None:
                stack.append((target, tuple(sorted(edge.get("extra", ()))), False))
    return pins


def _uv_pin(name: str, pkg: dict[str, Any], source: dict[str, Any], path: Path) -> Pin:
    if "editable" in source:
        return Pin(name=name, editable=str((path.parent / source["editable"]).resolve()))
    if "git" in source:
        return Pin(name=name, version=pkg.get("version"), url="git+" + source["git"])
    return Pin(name=name, version=pkg.get("version"))


def read_pylock(path: Path, env: dict[str, str]) -> dict[str, Pin]:
    """PEP 751 pylock.toml: [[packages]] whose marker holds for this interpreter."""
    data = _toml(path)
    if "lock-version" not in data or not isinstance(data.get("packages"), list):
        raise LockfileError(f"{path}: not a PEP 751 lock (needs lock-version and [[packages]])")
    pins: dict[str, Pin] = {}
    for pkg in data["packages"]:
        if not isinstance(pkg, dict) or not isinstance(pkg.get("name"), str):
            raise LockfileError(f"{path}: a [[packages]] entry has no name")
        if not _applies(pkg.get("marker"), env, where=str(path)):
            continue
        name = canonicalize_name(pkg["name"])
        directory = pkg.get("directory")
        if isinstance(directory, dict) and directory.get("editable"):
            pins[name] = Pin(name=name, editable=str((path.parent / directory["path"]).resolve()))
        elif isinstance(pkg.get("vcs"), dict):
            vcs = pkg["vcs"]
            pins[name] = Pin(
                name=name,
                version=pkg.get("version"),
                url=f"{vcs.get('type', 'git')}+{vcs.get('url')}",
            )
        else:
            pins[name] = Pin(name=name, version=pkg.get("version"))
    return pins


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not buffer:
            start = number
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        if buffer.strip():
            out.append((start, buffer.strip()))
        buffer = ""
    if buffer.strip():
        out.append((start, buffer.strip()))
    return out


def read_requirements(path: Path, env: dict[str, str], *, _depth: int = 0) -> dict[str, Pin]:
    """A pinned requirements.txt: `name==version`, `name @ url`, `-e path`, `-r other.txt`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LockfileError(f"{path}: cannot read ({exc.strerror})") from None
    pins: dict[str, Pin] = {}
    for number, line in _logical_lines(text):
        where = f"{path}:{number}"
        if line.startswith(("-r ", "--requirement ")) and _depth < 10:
            pins.update(
                read_requirements(path.parent / line.split(None, 1)[1], env, _depth=_depth + 1)
            )
            continue
        if line.startswith(("-e ", "--editable ")):
            target = line.split(None, 1)[1].strip()
            local = Path(target.removeprefix("file://"))
            full = (path.parent / local).resolve()
            name = _editable_name(full)
            pins[name or str(full)] = Pin(name=name or str(full), editable=str(full))
            continue
        if line.startswith("-"):
            continue  # --index-url, --hash-only lines, -c: not pins
        requirement_text = re.split(r"\s--hash[=\s]", line)[0].strip()
        try:
            req = Requirement(requirement_text)
        except InvalidRequirement as exc:
            raise LockfileError(
                f"{where}: invalid requirement {requirement_text!r} ({exc})"
            ) from None
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = canonicalize_name(req.name)
        specs = list(req.specifier)
        if req.url:
            pins[name] = Pin(name=name, url=req.url)
        elif len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
            pins[name] = Pin(name=name, version=specs[0].version)
        else:
            pins[name] = Pin(name=name, specifier=str(req.specifier) or None)
    return pins


def _editable_name(folder: Path) -> str | None:
    pyproject = folder / "pyproject.toml"
    if pyproject.is_file():
        try:
            name = (
                tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("name")
            )
        except (OSError, tomllib.TOMLDecodeError):
            return None
        return canonicalize_name(name) if isinstance(name, str) else None
    return None


def read_lock(path: Path, snapshot: Snapshot) -> dict[str, Pin]:
    """Pins from any supported lockfile, evaluated for the snapshot's interpreter."""
    if not path.is_file():
        raise LockfileError(f"--lock {path}: no such file")
    env = _marker_env(snapshot)
    if path.name == "uv.lock":
        return read_uv_lock(path, env)
    if path.name == "pylock.toml" or re.fullmatch(r"pylock\.[^.]+\.toml", path.name):
        return read_pylock(path, env)
    if path.suffix == ".toml":
        data = _toml(path)
        return read_pylock(path, env) if "lock-version" in data else read_uv_lock(path, env)
    return read_requirements(path, env)


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _matches(installed: str, pinned: str) -> bool:
    try:
        return SpecifierSet(f"=={pinned}").contains(installed, prereleases=True)
    except (InvalidVersion, ValueError):
        return False


def lock_drift(snapshot: Snapshot, pins: dict[str, Pin], *, policy: Policy, lock: str) -> Drift:
    """Packages whose pin differs, or that are in one of snapshot and lock but not the other."""
    packages = snapshot.package_map()
    changes: list[Change] = []

    def add(
        kind: str,
        name: str,
        expected: str | None,
        actual: str | None,
        message: str,
        default: Severity | None = None,
    ) -> None:
        if default is None:
            default = Severity.critical if policy.is_critical_package(name) else Severity.warning
        changes.append(
            Change(
                section="packages",
                kind=kind,
                name=name,
                expected=expected,
                actual=actual,
                severity=policy.level("packages", kind, default),
                message=message,
            )
        )

    # An editable pin found by path (requirements.txt `-e DIR`) is matched by that path.
    editables = {p.source.path: p.name for p in packages.values() if p.source.kind == "editable"}
    pins = {
        editables.get(pin.editable, key) if pin.editable and key not in packages else key: pin
        for key, pin in pins.items()
    }
    for name in sorted(packages.keys() | pins.keys()):
        if policy.ignores_package(name):
            continue
        pkg, pin = packages.get(name), pins.get(name)
        if pin is None and pkg is not None:
            add(
                "not_in_lock",
                name,
                pkg.version,
                None,
                f"{name} {pkg.version} is installed but not in {lock}",
            )
        elif pkg is None and pin is not None:
            add(
                "not_installed",
                name,
                None,
                pin.version or pin.url or pin.editable,
                f"{name} is in {lock} but not in the snapshot",
            )
        elif pkg is not None and pin is not None:
            if pin.version is not None and not _same_version(pkg.version, pin.version):
                if _matches(pkg.version, pin.version):  # ==2.11.0 admits 2.11.0+cu128
                    add(
                        "variant_unpinned",
                        name,
                        pkg.version,
                        pin.version,
                        f"{name}: {lock} pins {pin.version}, which admits the installed"
                        f" {pkg.version} but not its build variant",
                        default=Severity.info,
                    )
                    continue
                add(
                    "pin_differs",
                    name,
                    pkg.version,
                    pin.version,
                    f"{name}: snapshot has {pkg.version}, {lock} pins {pin.version}",
                )
            elif pin.specifier and not SpecifierSet(pin.specifier).contains(
                pkg.version, prereleases=True
            ):
                add(
                    "pin_differs",
                    name,
                    pkg.version,
                    pin.specifier,
                    f"{name}: snapshot has {pkg.version}, {lock} asks {pin.specifier}",
                )
            elif (
                pin.url
                and pkg.source.kind == "vcs"
                and pkg.source.commit
                and (pkg.source.commit not in pin.url)
            ):
                add(
                    "pin_differs",
                    name,
                    pkg.source.commit[:12],
                    pin.url,
                    f"{name}: snapshot has commit {pkg.source.commit[:12]}, {lock} pins {pin.url}",
                )
    return Drift(
        changes=sort_changes(changes),
        metrics=dict(snapshot.metrics),
        expected_name=snapshot.name,
        actual_name=lock,
    )
