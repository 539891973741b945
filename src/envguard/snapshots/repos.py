"""Where git work trees are, found without running git or importing GitPython: the nearest
folder with a `.git` entry. The state of each repo (HEAD, branch, dirtiness, diff hash,
remote) is read by the probe with git itself (probe/target/gitrepos.py), on this host as
through --via, while this side loads its models."""

from __future__ import annotations

from pathlib import Path


def find_work_tree(path: Path) -> Path | None:
    """The top of the git work tree holding ``path``, or None (``path`` itself when it is a
    git directory: the probe refuses it by name, and git never opens it)."""
    if is_git_directory(path):
        return path
    here = path.absolute()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return None


def is_git_directory(path: Path) -> bool:
    """A folder that is a git directory itself (HEAD, objects/, refs/), not a work tree: a
    pull request can commit one, with a config that runs programs; git is never run on it."""
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()
