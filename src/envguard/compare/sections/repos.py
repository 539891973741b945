"""Git work trees: HEAD, branch and uncommitted changes of the code that trains."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import TYPE_CHECKING

from envguard.compare.sections.base import Section
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.compare.models import Change
    from envguard.snapshots.models import Snapshot

C, W, I = Severity.critical, Severity.warning, Severity.info  # noqa: E741


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    actual = {r.path: r for r in a.repos}
    for er in e.repos:
        ar = actual.get(er.path)
        if ar is None or ar.error:
            b.add(
                "missing",
                er.path,
                expected=er.head,
                severity=W,
                message=f"repo {er.path} " + (ar.error if ar and ar.error else "is gone"),
            )
            continue
        if er.head != ar.head:
            b.add(
                "head_moved",
                er.path,
                expected=er.head,
                actual=ar.head,
                severity=C,
                message=f"repo {er.path}: HEAD moved {(er.head or '-')[:12]} ->"
                f" {(ar.head or '-')[:12]}",
            )
        if er.branch != ar.branch:
            b.add(
                "branch_changed",
                er.path,
                expected=er.branch,
                actual=ar.branch,
                severity=I,
                message=f"repo {er.path}: branch {er.branch or '(detached)'} ->"
                f" {ar.branch or '(detached)'}",
            )
        if ar.dirty and not er.dirty:
            b.add(
                "dirty",
                er.path,
                expected="clean",
                actual="dirty",
                severity=W,
                message=f"repo {er.path} has uncommitted changes (the good run was clean)",
            )
        elif ar.dirty and er.diff_sha256 != ar.diff_sha256:
            b.add(
                "dirty_differently",
                er.path,
                expected=(er.diff_sha256 or "")[:12],
                actual=(ar.diff_sha256 or "")[:12],
                severity=W,
                message=f"repo {er.path}: uncommitted changes differ from the good run's",
            )
        elif er.dirty and not ar.dirty:
            b.add(
                "clean",
                er.path,
                expected="dirty",
                actual="clean",
                severity=W,
                message=f"repo {er.path} is clean, but the good run had uncommitted changes",
            )


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    for repo in snap.repos:
        state = (repo.head or "no commit")[:12]
        if repo.dirty:
            state += f" dirty:{(repo.diff_sha256 or '')[:8]}"
        yield f"repo {repo.path}", state


# A pathspec that leaves every snapshots/ folder of the work tree out of a stash.
KEEP_SNAPSHOTS = ":(exclude,glob)**/snapshots/**"


def restore_hint(change: Change, snapshot: Snapshot) -> str | None:
    q = shlex.quote
    if change.kind == "head_moved" and change.expected:
        return (
            f"{change.message}; to restore: git -C {q(change.name)} checkout {q(change.expected)}"
        )
    if change.kind in ("dirty", "dirty_differently"):
        # What makes a repo dirty is its tracked changes (untracked files do not): the stash
        # takes those alone, and never snapshots/ or an untracked guard history, which the
        # next `diff` or `undo` needs (--include-untracked would take both away).
        return (
            f"{change.message}; to set them aside (snapshots/ and untracked files stay):"
            f" git -C {q(change.name)} stash push -- . {q(KEEP_SNAPSHOTS)}"
        )
    return change.message


SECTION = Section(
    name="repos",
    title="git repos",
    compare=compare,
    identity=identity,
    restore_hint=restore_hint,
)
