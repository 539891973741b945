"""Git state through the `git` command, on the far side of --via (no gitpython there)."""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import stat

from .confine import (
    DIFF_ARGS,
    OUTSIDE,
    SAFE_GIT_ENV,
    drivers_named,
    run_git,
    run_gits,
    without_filters,
)
from .reading import escaped_name
from .redact import redact_url

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

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


def _line(out: Optional[str]) -> str:
    """git's one line of output, its line break taken off and nothing else (a folder's name
    may end in a space: stripped, it names another folder, maybe another repo)."""
    return (out or "")[:-1] if (out or "").endswith("\n") else (out or "")


def git_top(path: str) -> Optional[str]:
    return _line(_git(path, "rev-parse", "--show-toplevel")) or None


# Asked together where the repo was named, before its top is known (both run nothing the
# config names, and read no file a filter would touch): where the work tree and its index
# are and the branch (`--abbrev-ref=loose` shortens as `symbolic-ref --short` does; "HEAD"
# where it is detached; an unborn branch fails, and is asked on its own), then the config
# keys that name the filter drivers to switch off, the remotes and their URL rewrites (the
# branch keys too: some make `git remote` fail). The top is asked twice, around the index:
# a line break in a path is then told from a branch git left out (an ambiguous HEAD).
_FIRST = (
    (
        "rev-parse",
        "--show-toplevel",
        "--git-path",
        "index",
        "--show-toplevel",
        "--abbrev-ref=loose",
        "HEAD",
        "--",
    ),
    ("config", "-z", "--get-regexp", r"^(filter|remote|url|branch)\."),
)
# Then, with the filters off and the index copied: HEAD, tracked changes and untracked
# files in one status (porcelain v2, git >= 2.11), and the diff whose hash is recorded. The
# diff runs beside the status, not after it where the status lists a tracked path: a git
# that waits for another's answer waits for a core too, while the check's shares run (in
# a dirty work tree, a CUDA torch snapshot took 7 ms longer that way; in a clean one, 1.6
# ms less).
_STATUS = ("status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all")
_DIFF = ("diff", *DIFF_ARGS, "HEAD", "--")


def _text(answer: Optional[Tuple[int, bytes]]) -> Optional[str]:
    """What a git that exited 0 printed, else None (as _git answers)."""
    if answer is None or answer[0] != 0:
        return None
    return answer[1].decode("utf-8", "surrogateescape")


def git_repo(path: str) -> Dict[str, Any]:
    """A repo record: HEAD, branch, dirtiness, the hash of `git diff HEAD`, the remote."""
    if _is_git_directory(path):
        return {"path": path, "error": GITDIR_REFUSED}
    where, config = run_gits(path, _FIRST, env=SAFE_GIT_ENV)
    top, index, branch = _where(path, where)
    if top is not None and os.path.realpath(path) != top:
        # The status and the diff run at the top, where git may find another repository
        # than the one named (a core.worktree naming a folder inside another work tree):
        # the filters to switch off, the index, the branch and the remote are asked there.
        where, config = run_gits(top, _FIRST, env=SAFE_GIT_ENV)
        index, branch = _where(top, where)[1:]
    if top is None:
        error = "no such directory" if not os.path.isdir(path) else "not a git work tree"
        return {"path": path, "error": error}
    # Every filter the config names switched off (confine.without_filters).
    safe = without_filters(drivers_named(config[1] if config is not None else None))
    scratch = _index_copy(index, safe)
    try:
        status, diff = run_gits(top, (_STATUS, _DIFF), env=safe)
        found = _status(_text(status))
        if found is None:  # an older git, or a status that failed: one question at a time
            head = (_git(top, "rev-parse", "--verify", "-q", "HEAD", safe=safe) or "").strip()
            tracked = bool((_git(top, "status", "--porcelain", "-uno", safe=safe) or "").strip())
            others = _git(top, "ls-files", "--others", "--exclude-standard", "-z", safe=safe)
            untracked = len([p for p in (others or "").split("\0") if p])
            found = (head or None, tracked, untracked)
        return _record(
            top, found, diff=_text(diff) or "", branch=branch, remote=_remote(top, config)
        )
    finally:
        if scratch is not None:
            _remove(scratch)


def _where(path: str, where: Optional[Tuple[int, bytes]]) -> Tuple[Optional[str], str, Any]:
    """(the work tree's top, its index, its branch) from _FIRST's rev-parse run at
    ``path``, else asked one at a time there (a line break in a path, an unborn branch)."""
    lines = (_text(where) or "").split("\n")
    if (
        len(lines) == 6
        and lines[0] == lines[2]
        and lines[3][:1] not in ("", "/")  # (a path, where a branch was left out)
        and lines[4:] == ["--", ""]
    ):
        index = os.path.join(path, lines[1])  # relative to where git ran
        return lines[0] or None, index, None if lines[3] == "HEAD" else lines[3]
    top = git_top(path)
    if top is None:
        return None, "", None
    index = _line(_git(top, "rev-parse", "--git-path", "index"))
    branch = _git(top, "symbolic-ref", "--short", "-q", "HEAD")
    return top, os.path.join(top, index) if index else "", branch


def _index_copy(index: str, safe: Dict[str, str]) -> Optional[str]:
    """git diff refreshes the index it reads and writes it back: point git at a copy
    (GIT_INDEX_FILE), so reading a repo never writes the user's .git/index. Returns the
    scratch folder to remove, or None (no index, or it could not be copied: git then
    reads the real one, and may refresh it as any `git diff` does)."""
    if not index or not os.path.isfile(index) or os.path.islink(index):
        return None
    scratch = _scratch_folder()
    if scratch is None:
        return None
    copy = os.path.join(scratch, "index")
    try:
        _copy_file(index, copy)
    except OSError:
        _remove(scratch)
        return None
    safe["GIT_INDEX_FILE"] = copy
    return scratch


def _scratch_folder() -> Optional[str]:
    """A new private folder in the temporary directory, found as tempfile finds it
    (TMPDIR, TEMP, TMP, then the usual places), without importing tempfile (which imports
    shutil and random, a cost at every probe); None where none can be made."""
    places = [os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")]
    places += ["/tmp", "/var/tmp", "/usr/tmp"]
    for place in places:
        if not place:
            continue
        for _ in range(3):  # a name taken (by chance): another one
            name = "%s%d-%s" % (_SCRATCH, os.getpid(), os.urandom(6).hex())
            folder = os.path.join(os.path.abspath(place), name)
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                continue
            except OSError:
                break  # not writable here: the next place
            _sweep(os.path.dirname(folder))
            return folder
    return None


_SCRATCH = "envguard-index-"
# A scratch folder left this long ago by a process that is gone is a leftover: a probe
# killed while git ran (SIGKILL at a deadline runs no clean-up). Long, so that a probe in
# another PID namespace sharing this folder (its PID means nothing here) is never touched.
LEFTOVER_SECONDS = 3600


def _sweep(place: str) -> None:
    """Remove the scratch folders in ``place`` that probes of this user left behind: named
    with a PID that no process has now, and untouched for LEFTOVER_SECONDS."""
    import time

    try:
        names = [n for n in os.listdir(place) if n.startswith(_SCRATCH)]
    except OSError:
        return
    old = time.time() - LEFTOVER_SECONDS
    for name in names:
        pid = name[len(_SCRATCH) :].partition("-")[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue  # (an older envguard's name tells no PID: left alone)
        folder = os.path.join(place, name)
        try:
            st = os.lstat(folder)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mtime > old:
                continue
            os.kill(int(pid), 0)
            continue  # that process is still there
        except ProcessLookupError:
            _remove(folder)
        except (OSError, OverflowError):
            continue


def _copy_file(source: str, dest: str) -> None:
    """``source``'s bytes and times into the new file ``dest`` (shutil.copy2 without
    shutil, whose import is a cost at every probe). The times matter: git's "racily clean"
    check compares file times with the index's mtime; a fresh one would make a file
    changed in the same second look unchanged."""
    # Non-blocking and no link: a FIFO or link put there since it was looked at is refused.
    fd = os.open(source, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError("not a regular file")
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
        finally:
            os.close(out)
    finally:
        os.close(fd)
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))


def _remove(scratch: str) -> None:
    """The scratch folder and what git left in it (the index copy, a lock), never more."""
    try:
        for name in os.listdir(scratch):
            os.unlink(os.path.join(scratch, name))
        os.rmdir(scratch)
    except OSError:
        pass


def _status(text: Optional[str]) -> Optional[Tuple[Optional[str], bool, int]]:
    """(HEAD, tracked changes, untracked files) from `git status --porcelain=v2 --branch -z
    --untracked-files=all`, or None when there is no such answer. "Tracked changes" is what
    `git status --porcelain -uno` would list: that leaves out a submodule whose only change
    is untracked files inside it (``S..U``)."""
    if text is None:
        return None
    head: Optional[str] = None
    tracked, untracked = False, 0
    fields = text.split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if entry.startswith("# branch.oid "):
            oid = entry[len("# branch.oid ") :]
            head = None if oid == "(initial)" else oid
        elif entry.startswith("? "):
            untracked += 1
        elif entry.startswith(("1 ", "2 ", "u ")):
            if entry.startswith("2 "):
                i += 1  # a rename or copy: its source path follows
            parts = entry.split(" ", 3)
            if not (parts[0] == "1" and parts[1] == ".M" and parts[2] == "S..U"):
                tracked = True
        elif entry and not entry.startswith(("# ", "! ")):
            return None  # not the format asked for
    return head, tracked, untracked


def _remote(top: str, config: Optional[Tuple[int, bytes]]) -> Optional[str]:
    """The URL of origin (else of the first remote by name, as `git remote` sorts them),
    credentials taken out: the first ``remote.<name>.url`` of the config (_FIRST's query),
    rewritten by the longest ``url.<base>.insteadOf`` that starts it, as git reads it.
    `git remote -v` answers where the config holds what git may read otherwise or refuse
    (_plain_remotes), and `git remote get-url` where the remote has no URL there (git then
    looks in .git/remotes and .git/branches, or takes the name for one)."""
    if config is None or config[0] not in (0, 1):  # (1: no such key)
        return None
    urls: Dict[str, List[str]] = {}
    rewrites: Dict[str, List[str]] = {}  # base -> the prefixes it replaces, as first named
    for entry in config[1].decode("utf-8", "surrogateescape").split("\0"):
        if not entry:
            continue
        key, valued, value = entry.partition("\n")
        section, _, rest = key.partition(".")
        name, dotted, variable = rest.rpartition(".")
        if section not in ("remote", "url", "branch"):
            continue
        if not _plain_remotes(section, name, dotted, variable, valued, value):
            return _listed_remote(top)
        if section == "remote" and name and not name.startswith("/"):
            named = urls.setdefault(name, [])
            if variable == "url":
                named.append(value)
        elif section == "url" and dotted and variable == "insteadof":
            rewrites.setdefault(name, []).append(value)
    if not urls:
        return None
    names = sorted(urls, key=lambda n: n.encode("utf-8", "surrogateescape"))
    name = "origin" if "origin" in urls else names[0]
    if not urls[name]:
        url = (_git(top, "remote", "get-url", name, safe=SAFE_GIT_ENV) or "").strip()
        return redact_url(url) if url else None
    url = urls[name][0]
    longest: Optional[Tuple[str, str]] = None
    for base, prefixes in rewrites.items():
        for prefix in prefixes:
            if url.startswith(prefix) and (longest is None or len(longest[1]) < len(prefix)):
                longest = (base, prefix)
    if longest is not None:
        url = longest[0] + url[len(longest[1]) :]
    url = url.strip()
    return redact_url(url) if url else None


# The remote keys git reads as booleans (a value it cannot read as one fails `git remote`),
# and the words it reads as one (any case; a whole number, too).
_REMOTE_BOOLS = ("mirror", "skipdefaultupdate", "skipfetchall", "prune", "prunetags")
_BOOL_WORDS = ("true", "yes", "on", "false", "no", "off", "")
# What a fetch refspec's sides are made of, read here (git refuses a malformed one, and
# `git remote` fails): anything else is left to git.
_REF_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./*")


def _plain_remotes(
    section: str, name: str, dotted: str, variable: str, valued: str, value: str
) -> bool:
    """Whether a remote, url or branch key of the config reads as _remote() reads it, as
    `git remote` does. Not: a key without a value (git refuses most), an empty subsection
    (``[branch ""]``), an empty URL (git 2.46 and later clear the URLs named before it
    with one), a boolean git cannot read, and followRemoteHEAD (git 2.48 checks its
    value)."""
    if not valued or (dotted and not name):
        return False
    if section != "remote":
        return True
    if variable == "url":
        return bool(value)
    if variable == "fetch":
        return _plain_refspec(value)
    if variable in _REMOTE_BOOLS:
        word = value.lower()
        digits = word[1:] if word[:1] == "-" else word
        # (a whole number as git reads one: no leading zero, which it reads as octal)
        number = digits.isascii() and digits.isdigit() and digits[:1] != "0"
        return word in _BOOL_WORDS or word == "0" or (number and len(word) < 10)
    return variable != "followremotehead"


def _plain_refspec(value: str) -> bool:
    """A fetch refspec git surely reads (``+refs/heads/*:refs/remotes/origin/*``, one
    branch's, GitHub's pull requests'): two sides of plain ref characters, each with the
    same number of ``*`` (none or one), no part empty, starting or ending with a dot."""
    sides = (value[1:] if value[:1] == "+" else value).split(":")
    if len(sides) != 2 or sides[0].count("*") != sides[1].count("*"):
        return False
    for side in sides:
        if side.count("*") > 1 or not set(side) <= _REF_CHARS:
            return False
        for part in side.split("/"):
            if not part or part[0] == "." or part[-1] == "." or part.endswith(".lock"):
                return False
    return ".." not in value


def _listed_remote(top: str) -> Optional[str]:
    """The URL of origin (else of the first remote), credentials taken out, from `git
    remote -v` (``name<TAB>url (fetch)``, sorted by name, as `git remote` lists them);
    `git remote get-url` where that output does not say it plainly."""
    text = _git(top, "remote", "-v", safe=SAFE_GIT_ENV)
    if not text:
        return None
    names: List[str] = []
    fetch: Dict[str, List[str]] = {}
    plain = True
    for row in text.split("\n"):
        if not row:
            continue
        name, _, rest = row.partition("\t")
        if name not in names:
            names.append(name)
        if rest.endswith(" (fetch)"):
            fetch.setdefault(name, []).append(rest[: -len(" (fetch)")])
        elif not (rest.endswith(" (push)") or (rest == "" and name)):
            plain = False  # a URL with a line break in it, say
    if not names:
        return None
    name = "origin" if "origin" in names else names[0]
    urls = fetch.get(name, [])
    if plain and len(urls) == 1:
        url = urls[0].strip()
    else:
        url = (_git(top, "remote", "get-url", name, safe=SAFE_GIT_ENV) or "").strip()
    return redact_url(url) if url else None


def _record(
    top: str,
    found: Tuple[Optional[str], bool, int],
    *,
    diff: str,
    branch: Optional[str],
    remote: Optional[str],
) -> Dict[str, Any]:
    head, tracked, untracked = found
    diff = diff.rstrip("\n") if head else ""
    dirty = bool(diff) or tracked
    digest = None
    if dirty:
        import hashlib  # here: a clean repo hashes nothing, and loading it costs a probe

        digest = hashlib.sha256(diff.encode("utf-8", "surrogateescape")).hexdigest()
    return {
        "path": top,
        "head": head,
        "branch": (branch or "").strip() or None,
        "dirty": dirty,
        "diff_sha256": digest,
        "untracked": untracked,
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
    # What a repo names itself (a branch, a remote's URL, its folder) may hold a character
    # the host refuses in a line (git allows U+202E in a branch): written as its escape.
    for record in out:
        for key in ("path", "branch", "remote"):
            if isinstance(record.get(key), str):
                record[key] = escaped_name(record[key])
    return out
