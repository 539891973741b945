"""Which install pulled in which change: drifted packages grouped under the top-level package
whose requirements reach them, from the Requires-Dist the probe records (the question
`pipdeptree` / `uv pip tree --invert` answer by hand)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envguard.snapshots.models import Package, Snapshot

# The package-section changes an install can cause.
CAUSED_KINDS = frozenset(
    {"added", "upgraded", "downgraded", "variant_changed", "version_changed", "source_changed"}
)


@dataclass(frozen=True)
class Cause:
    """A top-level package that changed, and the other changed packages it reaches."""

    root: str
    members: tuple[str, ...]


def dependency_graph(snap: Snapshot) -> dict[str, set[str]]:
    """Installed package -> the installed packages its requirements name, markers evaluated
    for the snapshot's interpreter (with each extra that some installed package asks for)."""
    installed = snap.package_map()
    env = dict(snap.interpreter.markers)
    parsed: dict[str, list[Requirement]] = {}
    for name, pkg in installed.items():
        parsed[name] = list(_requirements(pkg))
    wanted_extras: dict[str, set[str]] = {}
    for reqs in parsed.values():
        for req in reqs:
            if req.extras:
                wanted_extras.setdefault(canonicalize_name(req.name), set()).update(req.extras)
    graph: dict[str, set[str]] = {}
    for name, reqs in parsed.items():
        extras = ["", *sorted(wanted_extras.get(name, ()))]
        edges: set[str] = set()
        for req in reqs:
            target = canonicalize_name(req.name)
            if target == name or target not in installed:
                continue
            if req.marker is None or any(_holds(req, {**env, "extra": e}) for e in extras):
                edges.add(target)
        graph[name] = edges
    return graph


def _requirements(pkg: Package) -> Iterable[Requirement]:
    for text in pkg.requires:
        try:
            yield Requirement(text)
        except InvalidRequirement:
            continue  # damaged metadata: that edge is unknown, nothing else changes


def _holds(req: Requirement, env: dict[str, str]) -> bool:
    try:
        return req.marker is None or req.marker.evaluate(env)
    except (InvalidMarker, ValueError, KeyError, TypeError, RecursionError):
        return False


def group_changes(actual: Snapshot, changed: set[str]) -> list[Cause]:
    """The causes among ``changed`` package names: each changed package that no installed
    package requires is a root; its group is every other changed package its requirements
    reach (through unchanged ones too). A package reached from two roots is in both groups.
    Roots that pull in nothing are left out. (REQUESTED is not used: uv writes it for every
    package it installs.)"""
    graph = dependency_graph(actual)
    installed = actual.package_map()
    required = {target for targets in graph.values() for target in targets}
    roots = sorted(name for name in changed if name in installed and name not in required)
    causes = []
    for root in roots:
        seen, stack = {root}, [root]
        while stack:
            for target in graph.get(stack.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    stack.append(target)
        members = tuple(sorted((seen - {root}) & changed))
        if members:
            causes.append(Cause(root=root, members=members))
    return causes
