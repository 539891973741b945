"""Git state through the `git` command, on the far side of --via (no gitpython there)."""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os

from .confine import DIFF_ARGS, OUTSIDE, SAFE_GIT_ENV, git_env, run_git
from .redact import redact_url

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

    from .confine import Roots


def _git(path: str, *args: str, safe: Optional[Dict[str, str]] = None) -> Optional[str]:
    import subprocess

    try:
        proc = run_git(path, *args, env=safe or SAFE_GIT_ENV, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.decode("utf-8", "surrogateescape")


# A folder that is a git directory itself (HEAD, objects/, refs/) and not a work tree: a
# pull request can commit one, with a config that names programs. git is never run on it.
GITDIR_REFUSED = "a git directory, not a work tree: refused (its config could name programs)"


def _is_git_directory(path: str) -> bool:
    return (
        os.path.isfile(os.path.join(path, "HEAD"))
        and os.path.isdir(os.path.join(path, "objects"))
        and os.path.isdir(os.path.join(path, "refs"))
    )


def git_top(path: str) -> Optional[str]:
    out = _git(path, "rev-parse", "--show-toplevel")
    return out.strip() if out else None


def git_repo(path: str) -> Dict[str, Any]:
    """A repo record: HEAD, branch, dirtiness, the hash of `git diff HEAD`, the remote."""
    if _is_git_directory(path):
        return {"path": path, "error": GITDIR_REFUSED}
    top = git_top(path)
    if top is None:
        error = "no such directory" if not os.path.isdir(path) else "not a git work tree"
        return {"path": path, "error": error}
    safe = git_env(top)  # every filter the config names switched off
    scratch = _index_copy(top, safe)
    try:
        return _measure(top, safe)
    finally:
        if scratch is not None:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)


def _index_copy(top: str, safe: Dict[str, str]) -> Optional[str]:
    """git diff refreshes the index it reads and writes it back: point git at a copy
    (GIT_INDEX_FILE), so reading a repo never writes the user's .git/index. Returns the
    scratch folder to remove, or None (no index, or it could not be copied: git then
    reads the real one, and may refresh it as any `git diff` does)."""
    import shutil
    import tempfile

    where = (_git(top, "rev-parse", "--git-path", "index", safe=safe) or "").strip()
    if not where:
        return None
    index = where if os.path.isabs(where) else os.path.join(top, where)
    try:
        if not os.path.isfile(index) or os.path.islink(index):
            return None
        scratch = tempfile.mkdtemp(prefix="envguard-index-")
        # copy2: the copy keeps the index's mtime, which git's "racily clean" check compares
        # file times with; a fresh mtime would make a file changed in the same second look
        # unchanged.
        shutil.copy2(index, os.path.join(scratch, "index"))
    except OSError:
        return None
    safe["GIT_INDEX_FILE"] = os.path.join(scratch, "index")
    return scratch


def _measure(top: str, safe: Dict[str, str]) -> Dict[str, Any]:
    head = (_git(top, "rev-parse", "--verify", "-q", "HEAD", safe=safe) or "").strip() or None
    branch = (_git(top, "symbolic-ref", "--short", "-q", "HEAD", safe=safe) or "").strip() or None
    diff = _git(top, "diff", *DIFF_ARGS, "HEAD", "--", safe=safe) or ""  # "--": a file named HEAD
    diff = diff.rstrip("\n") if head else ""
    status = _git(top, "status", "--porcelain", "-uno", safe=safe) or ""
    dirty = bool(diff) or bool(status.strip())
    untracked = _git(top, "ls-files", "--others", "--exclude-standard", "-z", safe=safe) or ""
    remotes = (_git(top, "remote", safe=safe) or "").split()
    remote = None
    if remotes:
        name = "origin" if "origin" in remotes else remotes[0]
        url = (_git(top, "remote", "get-url", name, safe=safe) or "").strip()
        remote = redact_url(url) if url else None
    import hashlib

    return {
        "path": top,
        "head": head,
        "branch": branch,
        "dirty": dirty,
        "diff_sha256": hashlib.sha256(diff.encode("utf-8", "surrogateescape")).hexdigest()
        if dirty
        else None,
        "untracked": len([p for p in untracked.split("\0") if p]),
        "remote": remote,
        "error": None,
    }


def probe_repos(
    args: Dict[str, Any], packages: List[Dict[str, Any]], roots: Roots
) -> List[Dict[str, Any]]:
    """The work trees of editable installs plus the repos named in ``args`` (if ``roots``
    admit them, or an editable install lives there)."""
    paths, out = [], []  # type: List[str], List[Dict[str, Any]]
    if args.get("editable_repos"):
        for pkg in packages:
            url = (pkg.get("direct_url") or {}).get("url", "")
            editable = ((pkg.get("direct_url") or {}).get("dir_info") or {}).get("editable")
            if editable and isinstance(url, str) and url.startswith("file://"):
                from urllib.parse import unquote, urlsplit

                top = git_top(unquote(urlsplit(url).path))
                if top:
                    paths.append(top)
    editable = {os.path.realpath(p) for p in paths}
    for named in args.get("repos", []):
        path = os.path.abspath(os.path.expanduser(named))
        if roots.admits(path) or os.path.realpath(path) in editable:
            paths.append(path)
        else:
            out.append({"path": path, "error": OUTSIDE + " (--allow PATH reads it)"})
    seen = set()
    for path in paths:
        record = git_repo(path)
        if record["path"] not in seen:
            seen.add(record["path"])
            out.append(record)
    return out
