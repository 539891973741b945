"""The code axis of `envguard bisect --repo`: the commit a snapshot recorded, a temporary
worktree (the user's checkout is never touched), and the binary search for the first bad
commit since the snapshot's, each commit judged by a callable the caller supplies."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from envguard.errors import ActionError, UsageError
from envguard.recovery.scratch import scratch_folder
from envguard.snapshots.models import Snapshot

_COMMIT = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")


def git(repo: Path, *args: str) -> str:
    """git ``args`` in ``repo`` (through confine.run_git); ActionError when it fails."""
    from envguard.confine import run_git

    try:
        proc = run_git(str(repo), *args, timeout=None)
    except OSError as exc:
        raise ActionError(f"git {args[0]} in {repo}: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.decode(errors="replace").strip().splitlines() or ["failed"])[-1]
        raise ActionError(f"git {args[0]} in {repo}: {last}")
    return proc.stdout.decode(errors="replace").strip()


def recorded_head(snap: Snapshot, repo: Path) -> str:
    """The commit ``snap`` recorded for the work tree ``repo``."""
    top = git(repo, "rev-parse", "--show-toplevel")
    heads = [r.head for r in snap.repos if r.head and os.path.realpath(r.path) == top]
    if not heads and len(snap.repos) == 1 and snap.repos[0].head:
        heads = [snap.repos[0].head]
    if not heads or not _COMMIT.match(heads[0]):
        raise UsageError(f"--repo {repo}: the snapshot records no commit for this repo")
    return heads[0]


def key(commit: str) -> str:
    """The step id that says a run was made at ``commit`` (in the log, beside unit ids)."""
    return f"commit:{commit[:12]}"


@dataclass(frozen=True)
class FirstBadCommit:
    """The commit bisect names: its full and short ids, its subject, whether the search
    finished (False: the culprit is at or before it, the budget ran out), and how many
    commits just before it could not be judged (skip), any of which may be the first."""

    sha: str
    short: str
    subject: str
    exact: bool
    skipped: int = 0


class Worktree:
    """A detached worktree of ``repo`` in a scratch folder, checked out on demand."""

    def __init__(self, repo: Path, path: Path) -> None:
        self.repo, self.path = repo, path
        self.at: str | None = None
        # The check runs where the user ran bisect, when that is inside the repo.
        top = Path(git(repo, "rev-parse", "--show-toplevel"))
        try:
            self.cwd = path / Path.cwd().resolve().relative_to(top.resolve())
        except ValueError:
            self.cwd = path

    def checkout(self, commit: str) -> Path:
        """The folder to run the check in, with ``commit`` checked out."""
        if self.at != commit:
            self.at = None
            git(self.path, "checkout", "--quiet", "--detach", commit)
            self.at = commit
        return self.cwd if self.cwd.is_dir() else self.path

    def subject(self, commit: str) -> str:
        return git(self.repo, "log", "-1", "--format=%h %s", commit)


@contextlib.contextmanager
def worktree(repo: Path, commit: str) -> Iterator[Worktree]:
    """A temporary worktree of ``repo`` at ``commit``, removed afterwards."""
    import shutil

    where = scratch_folder("bisect-worktree")
    tree = where / "tree"
    try:
        git(repo, "worktree", "add", "--quiet", "--detach", str(tree), commit)
        made = Worktree(repo, tree)
        made.at = commit
        yield made
    finally:
        with contextlib.suppress(ActionError):
            git(repo, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(where, ignore_errors=True)


def since(repo: Path, good_head: str) -> list[str]:
    """The first-parent commits after ``good_head`` up to HEAD, oldest first."""
    return git(repo, "rev-list", "--reverse", "--first-parent", f"{good_head}..HEAD").split()


def dirty(repo: Path) -> bool:
    """Whether ``repo``'s checkout has uncommitted changes to tracked files."""
    return bool(git(repo, "status", "--porcelain", "-uno"))


def first_bad(
    todo: list[str], test: Callable[[str], str], *, affordable: Callable[[str], bool]
) -> tuple[str, bool, int]:
    """Binary search over ``todo`` (oldest first; its last is known bad, the commit before
    its first known good): the first bad commit, whether the search finished, and how many
    skipped commits just before it could be the first bad one instead. A skip is judged by
    its neighbours, as ``git bisect skip``."""
    order = {c: i for i, c in enumerate(todo)}
    todo = list(todo)
    skipped: list[str] = []
    lo, hi = -1, len(todo) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if not affordable(todo[mid]):
            return todo[hi], False, 0
        result = test(todo[mid])
        if result == "skip":
            skipped.append(todo.pop(mid))
            hi -= 1
            continue
        lo, hi = (mid, hi) if result == "good" else (lo, mid)
    after = order[todo[lo]] if lo >= 0 else -1
    return todo[hi], True, sum(after < order[c] < order[todo[hi]] for c in skipped)
