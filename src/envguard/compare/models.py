"""Frozen pydantic models of what a comparison finds: drift between two environments (or a
snapshot and a lockfile) and the N-way comparison of a fleet."""

from __future__ import annotations

from pydantic import Field

from envguard.compare.severity import Severity
from envguard.snapshots.models import MetricValue, Model

__all__ = [
    "Change",
    "ChangeGroup",
    "Drift",
    "FleetFailure",
    "FleetGroup",
    "FleetItem",
    "FleetReport",
    "FleetValue",
    "Severity",
]


class Change(Model):
    section: str
    kind: str
    name: str
    expected: str | None = None
    actual: str | None = None
    severity: Severity
    message: str
    # Where the change is written (a lockfile's line): GitHub puts the annotation there.
    file: str | None = None
    line: int | None = None
    # The top-level installs that pulled this package in (compare.causes), if any.
    groups: tuple[str, ...] = ()
    # Where a lock installs the package when not everywhere by default (a lock change):
    # "extra cpu", "group dev", an environment marker ("sys_platform == 'win32'").
    scope: tuple[str, ...] = ()


def primary_changes(changes: tuple[Change, ...] | list[Change]) -> dict[str, Change]:
    """Each package's change that says what happened to it (added, upgraded, ...), before
    a second one about the same package (its installer, REQUESTED): name -> change."""
    order = ("added", "removed", "upgraded", "downgraded", "variant_changed", "version_changed")
    best: dict[str, Change] = {}
    for c in changes:
        if c.section != "packages":
            continue
        held = best.get(c.name)
        rank = order.index(c.kind) if c.kind in order else len(order) + (c.kind != "source_changed")
        if held is None or rank < (
            order.index(held.kind)
            if held.kind in order
            else len(order) + (held.kind != "source_changed")
        ):
            best[c.name] = c
    return best


class ChangeGroup(Model):
    """A top-level package that changed and the changed packages its install pulled in."""

    root: str
    members: tuple[str, ...]


class Drift(Model):
    changes: tuple[Change, ...] = ()
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    expected_name: str | None = None
    actual_name: str | None = None
    # What was checked against expected_name, in words ("snapshot good", "the environment
    # at .venv", "uv.lock (new)"): the clean verdict says which side matched what.
    subject: str | None = None
    notes: tuple[str, ...] = ()
    # The lines a person reads first (compare.verdict), and the install groups (compare.causes).
    verdict: tuple[str, ...] = ()
    groups: tuple[ChangeGroup, ...] = ()

    @property
    def max_severity(self) -> Severity | None:
        return max((c.severity for c in self.changes), key=lambda s: s.rank, default=None)

    def reaches(self, level: Severity | None) -> bool:
        """True when some change is at ``level`` or above (None: never)."""
        return level is not None and any(c.severity.rank >= level.rank for c in self.changes)


class FleetValue(Model):
    value: str
    hosts: tuple[str, ...]
    odd: bool


class FleetItem(Model):
    item: str
    values: tuple[FleetValue, ...]


class FleetGroup(Model):
    fingerprint: str
    hosts: tuple[str, ...]


class FleetFailure(Model):
    """A host with no environment to compare (no report, a broken one, the probe's error)."""

    host: str
    reason: str


class FleetReport(Model):
    hosts: tuple[str, ...]
    groups: tuple[FleetGroup, ...]
    differences: tuple[FleetItem, ...]
    odd_hosts: tuple[str, ...]
    baseline: str | None = None
    failed: tuple[FleetFailure, ...] = ()

    @property
    def agree(self) -> bool:
        return not self.differences and not self.failed
