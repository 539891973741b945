"""What a section is: everything about one part of a snapshot, defined in one place."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.compare.models import Change
    from envguard.snapshots.models import Snapshot


def no_hint(change: Change, snapshot: Snapshot) -> str | None:
    """Sections that a package rebuild restores need no hint."""
    return None


@dataclass(frozen=True)
class Section:
    """One section of a snapshot, as the diff engine, the fleet and restore see it.

    ``compare`` adds every change from the good snapshot to the other one; ``identity``
    yields the (item, value) pairs that must be equal on every node of a fleet (paths,
    times and sizes left out); ``restore_hint`` says how to restore a change that a package
    rebuild does not (None: nothing to say).
    """

    name: str
    title: str
    compare: Callable[[Collector, Snapshot, Snapshot], None]
    identity: Callable[[Snapshot], Iterable[tuple[str, str]]]
    restore_hint: Callable[[Change, Snapshot], str | None] = no_hint
