"""Which install pulled in which change: drifted packages grouped under the package whose
install pulled them in, from the Requires-Dist the probe records (the question
`pipdeptree` / `uv pip tree --invert` answer by hand)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envguard.snapshots.models import Package, Snapshot

if TYPE_CHECKING:  # packaging's requirement parser loads only when there is drift to group
    from packaging.requirements import Requirement

# The package-section changes an install can cause.
CAUSED_KINDS = frozenset(
    {"added", "upgraded", "downgraded", "variant_changed", "version_changed", "source_changed"}
)
# Bounds for a hostile or absurd snapshot: grouping is a reading aid, never a hang. Past
# these the drift is reported without groups (or with the extras left out).
MAX_EXTRAS_PER_PACKAGE = 16
MAX_PAIRS = 200_000


@dataclass(frozen=True)
class Cause:
    """A changed package whose install pulled in other changed packages."""

    root: str
    members: tuple[str, ...]


def dependency_graph(snap: Snapshot) -> dict[str, set[str]]:
    """Installed package -> the installed packages its requirements name, markers evaluated
    for the snapshot's interpreter: first without extras, then with the extras that an
    active requirement of another package asks for (at most MAX_EXTRAS_PER_PACKAGE)."""
    from packaging.utils import canonicalize_name

    installed = snap.package_map()
    env = dict(snap.interpreter.markers)
    parsed = {name: list(_requirements(pkg)) for name, pkg in installed.items() if pkg.requires}
    graph: dict[str, set[str]] = {name: set() for name in installed}
    wanted: dict[str, set[str]] = {}
    for name, reqs in parsed.items():
        for req in reqs:
            target = canonicalize_name(req.name)
            if target == name or target not in installed or not _holds(req, {**env, "extra": ""}):
                continue
            graph[name].add(target)
            if req.extras:
                wanted.setdefault(target, set()).update(req.extras)
    for name, extras in wanted.items():
        chosen = sorted(extras)[:MAX_EXTRAS_PER_PACKAGE]
        for req in parsed.get(name, ()):
            target = canonicalize_name(req.name)
            if target == name or target not in installed or req.marker is None:
                continue
            if "extra" in str(req.marker) and any(_holds(req, {**env, "extra": e}) for e in chosen):
                graph[name].add(target)
    return graph


def _requirements(pkg: Package) -> Iterable[Requirement]:
    from packaging.requirements import InvalidRequirement, Requirement

    for text in pkg.requires:
        try:
            yield Requirement(text)
        except InvalidRequirement:
            continue  # damaged metadata: that edge is unknown, nothing else changes


def _holds(req: Requirement, env: dict[str, str]) -> bool:
    from packaging.markers import InvalidMarker

    try:
        return req.marker is None or req.marker.evaluate(env)
    except (InvalidMarker, ValueError, KeyError, TypeError, RecursionError):
        return False


def group_changes(actual: Snapshot, changed: set[str]) -> list[Cause]:
    """The causes among ``changed`` package names. A changed package that no other changed
    package requires is a root (an install, or an upgrade of something only unchanged
    packages depend on); its group is every other changed package its requirements reach
    (through unchanged ones too). Changed packages that only require each other (a cycle)
    are roots in name order. A package reached from two roots is in both groups; roots that
    pull in nothing are left out."""
    if not any(p.requires for p in actual.packages):
        return []  # recorded before Requires-Dist was, or nothing requires anything
    graph = dependency_graph(actual)
    return fold(graph, changed, present=actual.package_map().keys())


def fold(
    graph: Mapping[str, Collection[str]], changed: set[str], *, present: Collection[str]
) -> list[Cause]:
    """The causes among ``changed`` names in a dependency ``graph`` (name -> what it
    requires) of the side where they are ``present``: group_changes' rule, for any graph
    (a snapshot's Requires-Dist, a lock's dependencies)."""
    here = sorted(name for name in changed if name in present)
    required = {t for name in here for t in graph.get(name, ()) if t != name}
    roots = [name for name in here if name not in required]
    reached: dict[str, set[str]] = {}
    pairs = 0
    for root in roots:
        reached[root] = _reach(graph, root) & changed
        pairs += len(reached[root])
        if pairs > MAX_PAIRS:
            return []
    covered = set(roots).union(*reached.values()) if reached else set(roots)
    for name in here:  # cycles: nothing outside reaches them
        if name not in covered:
            reached[name] = _reach(graph, name) & changed
            covered |= reached[name] | {name}
    return [
        Cause(root=root, members=tuple(sorted(members - {root})))
        for root, members in sorted(reached.items())
        if members - {root}
    ]


def _reach(graph: Mapping[str, Collection[str]], start: str) -> set[str]:
    seen, stack = {start}, [start]
    while stack:
        for target in graph.get(stack.pop(), ()):
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen
