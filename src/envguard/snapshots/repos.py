"""Git state of the code that trains: HEAD, branch, dirtiness and the shape of the diff."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from envguard.confine import DIFF_ARGS, SAFE_GIT_ENV
from envguard.errors import UsageError
from envguard.redact import redact_url

if TYPE_CHECKING:
    import git

    from envguard.snapshots.models import Repo


def _inside_git(path: Path) -> bool:
    """A cheap look for a .git entry upward, so gitpython is imported only when it is used."""
    here = path.absolute()
    return any((folder / ".git").exists() for folder in (here, *here.parents))


def find_work_tree(path: Path) -> Path | None:
    """The top of the git work tree holding ``path``, or None (``path`` itself when it is a
    git directory: capture_repo refuses it by name, and gitpython never opens it)."""
    if is_git_directory(path):
        return path
    if not _inside_git(path):
        return None
    import git

    try:
        repo = git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    if repo.bare or repo.working_tree_dir is None:
        return None
    return Path(repo.working_tree_dir)


def is_git_directory(path: Path) -> bool:
    """A folder that is a git directory itself (HEAD, objects/, refs/), not a work tree: a
    pull request can commit one, with a config that runs programs; git is never run on it."""
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()


def capture_repo(path: Path, *, strict: bool = True) -> Repo:
    """A Repo model for the work tree at ``path``; UsageError if it is not one (``strict``),
    else a Repo that records why git could not read it."""
    import git

    from envguard.snapshots.models import Repo

    if is_git_directory(path):
        why = "a git directory, not a work tree: refused (its config could name programs)"
        if strict:
            raise UsageError(f"--repo {path}: {why}")
        return Repo(path=str(path), error=why)
    try:
        repo = git.Repo(path)
    except git.NoSuchPathError:
        raise UsageError(f"--repo {path}: no such directory") from None
    except git.InvalidGitRepositoryError:
        raise UsageError(f"--repo {path}: not a git work tree") from None
    if repo.bare:
        raise UsageError(f"--repo {path}: a bare repository has no work tree")
    try:
        return _measure(repo, path)
    except (git.GitCommandError, ValueError, OSError) as exc:
        stderr = getattr(exc, "stderr", "") or str(exc)
        said = next((ln.strip() for ln in str(stderr).splitlines() if ln.strip()), "")
        why = f"git cannot read it ({said.strip(chr(39)).removeprefix('stderr: ')[:200]})"
        if strict:
            raise UsageError(f"--repo {path}: {why}") from None
        return Repo(path=str(path), error=why)


def _measure(repo: git.Repo, path: Path) -> Repo:

    from envguard.snapshots.models import Repo

    with repo.git.custom_environment(**SAFE_GIT_ENV):  # read-only git, as on the far side
        try:
            head: str | None = repo.head.commit.hexsha
        except ValueError:  # a repository with no commit yet
            head = None
        branch = None if repo.head.is_detached else repo.active_branch.name
        diff = repo.git.diff(*DIFF_ARGS, "HEAD", "--") if head else ""  # "--": a file named HEAD
        dirty = bool(diff) or repo.is_dirty(untracked_files=False)
        untracked = len(repo.untracked_files)
        remote = None
        if repo.remotes:
            chosen = next((r for r in repo.remotes if r.name == "origin"), repo.remotes[0])
            urls = list(chosen.urls)
            remote = redact_url(urls[0]) if urls else None
    return Repo(
        path=str(path),
        head=head,
        branch=branch,
        dirty=dirty,
        diff_sha256=hashlib.sha256(diff.encode("utf-8", "surrogateescape")).hexdigest()
        if dirty
        else None,
        untracked=untracked,
        remote=remote,
    )
