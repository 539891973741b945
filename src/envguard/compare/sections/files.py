"""Tracked files (model scripts, configs): their sha256."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import TYPE_CHECKING

from envguard.compare.sections.base import Section
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.compare.models import Change
    from envguard.snapshots.models import FileDigest, Snapshot


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    actual = {f.path: f for f in a.files}
    # Two snapshots of one checkout at two places (a clone, a container): the same file is
    # the one at the same path in its work tree, when that names exactly one.
    by_rel: dict[str, list[FileDigest]] = {}
    for f in a.files:
        if f.rel is not None:
            by_rel.setdefault(f.rel, []).append(f)
    for ef in e.files:
        af = actual.get(ef.path)
        if af is None and ef.rel is not None and len(by_rel.get(ef.rel, ())) == 1:
            af = by_rel[ef.rel][0]
        if af is None or af.sha256 is None:
            b.add(
                "missing",
                ef.path,
                expected=(ef.sha256 or "")[:12],
                severity=Severity.critical,
                message=f"tracked file {ef.path} "
                + (af.error if af is not None and af.error else "is missing"),
            )
        elif af.sha256 != ef.sha256:
            b.add(
                "changed",
                ef.path,
                expected=(ef.sha256 or "")[:12],
                actual=af.sha256[:12],
                severity=Severity.critical,
                message=f"tracked file {ef.path} changed ({ef.size} -> {af.size} bytes"
                + (f", read at {where}" if (where := af.read_from or af.path) != ef.path else "")
                + ")",
            )
        elif ef.mode is not None and af.mode is not None and af.mode != ef.mode:
            # The same bytes, other permission bits: a script that lost its executable bit
            # (a warning: git tracks that bit, and a launcher runs the file by it), a setuid,
            # setgid or sticky bit, or one anyone may now write (warnings too), or only read
            # and write bits another umask or a chmod gave it (info).
            execs = (ef.mode ^ af.mode) & 0o7113
            b.add(
                "mode",
                ef.path,
                expected=f"{ef.mode:04o}",
                actual=f"{af.mode:04o}",
                severity=Severity.warning if execs else Severity.info,
                message=f"tracked file {ef.path} mode {ef.mode:04o} -> {af.mode:04o}",
            )


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    for f in snap.files:
        yield f"file {f.path}", (f.sha256 or "missing")[:12]


def restore_hint(change: Change, snapshot: Snapshot) -> str | None:
    owner = next(
        (r for r in snapshot.repos if change.name.startswith(r.path.rstrip("/") + "/")), None
    )
    if owner is None or not owner.head:
        return f"{change.message}; restore it from your own copy"
    q = shlex.quote
    rel = change.name[len(owner.path.rstrip("/")) + 1 :]
    return (
        f"{change.message}; to restore the committed version: git -C {q(owner.path)}"
        f" checkout {q(owner.head)} -- {q(rel)}"
    )


SECTION = Section(
    name="files",
    title="tracked files",
    compare=compare,
    identity=identity,
    restore_hint=restore_hint,
)
