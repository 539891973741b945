"""uv.lock: the packages uv would install, walked from the workspace roots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envguard.compare.lockfiles.common import LockfileError, Pin, applies, read_toml


def read_uv_lock(path: Path, env: dict[str, str]) -> dict[str, Pin]:
    """Packages uv would install for this interpreter: a walk from the workspace roots."""
    data = read_toml(path)
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
            if not markers or any(applies(m, env, where=str(path)) for m in markers):
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
            if not applies(edge.get("marker"), env, where=str(path)):
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
