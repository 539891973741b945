"""Environment variables that change how training behaves (secrets only as hashes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from envguard.compare.sections.base import Section
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.snapshots.models import Snapshot

# Where the venv lives is not part of what it is (the interpreter's prefix says it, at info).
PATH_VARS = frozenset({"VIRTUAL_ENV"})
# Recorded, and said at info: the installers' own settings (UV_, PIP_: where the next
# install resolves from, uv run's own depth, a cache folder set in one shell and not in
# CI), and the launcher's bookkeeping (TORCHELASTIC_: a run id and an error file new at
# every torchrun launch). None changes how the training already installed runs.
INFO_PREFIXES = ("UV_", "PIP_", "TORCHELASTIC_")


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    for name in sorted(e.env.keys() | a.env.keys()):
        ev, av = e.env.get(name), a.env.get(name)
        if ev == av:
            continue
        info = name in PATH_VARS or name.startswith(INFO_PREFIXES)
        level = Severity.info if info else Severity.warning
        if ev is None:
            b.add("added", name, actual=av, severity=level, message=f"${name} is set now ({av})")
        elif av is None:
            b.add(
                "removed",
                name,
                expected=ev,
                severity=level,
                message=f"${name} is no longer set (was {ev})",
            )
        else:
            redacted = ev.startswith("<redacted") or av.startswith("<redacted")
            detail = "values redacted" if redacted else f"{ev} -> {av}"
            b.add(
                "changed",
                name,
                expected=ev,
                actual=av,
                severity=level,
                message=f"${name} changed ({detail})",
            )


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    for name, value in snap.env.items():
        if name not in PATH_VARS:
            yield f"env {name}", value


SECTION = Section(name="env", title="environment variables", compare=compare, identity=identity)
