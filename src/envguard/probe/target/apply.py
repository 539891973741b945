"""What a restore changes on the target, one operation at a time: stdlib only, Python 3.8.

The same functions run in-process for a local restore and, sent on stdin like the probe
(probe/payload.py), on the far side of --via: one implementation of every write. Each
operation takes one JSON-able dict and returns one ({"ok": false, "error": ...} on
failure); none raises to its caller, none leaves a half-written file: content is staged
beside its destination, verified by sha256, then renamed over it, and whatever it
displaced is kept beside it under a name that says so.
"""

# ruff: noqa: UP006, UP035, UP036, UP045
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import zlib

from .confine import Roots, not_python, run_git, unsafe_place, work_tree
from .reading import open_regular

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any, Callable, Dict, Optional

# What stays beside a restored path: the version it replaced.
DISPLACED = ".envguard-displaced-"
STAGE = ".envguard-stage-"
_BLOCK = 1 << 20


def _fail(message: str) -> Dict[str, Any]:
    return {"ok": False, "error": message[:500]}


def _why(exc: OSError) -> str:
    where = " (%s)" % exc.filename if exc.filename else ""
    return (exc.strerror or str(exc)) + where


NOT_HERE = "not written: outside the working directory, its git work tree and the cache folders"


def refused(dest: str, args: Dict[str, Any], cache: bool = False) -> Optional[str]:
    """Why ``dest`` may not be written, or None. With ``confine`` in ``args`` (a restore of
    what a snapshot names), symlinks resolved at this moment, it must lie:
    - a file or repo: under the working directory (never / or the home folder itself),
      its work tree or ``allow`` (--allow, --root);
    - a cache: inside this user's own compile cache folders or ``allow``; never another
      user's, never a folder that is (or holds) one of those roots;
    and never in a .git folder (a config or hook there runs programs)."""
    confine = args.get("confine")
    if not isinstance(confine, dict):
        return None
    cwd = confine.get("cwd") or os.getcwd()
    allow = [os.path.expanduser(a) for a in confine.get("allow", []) if isinstance(a, str) and a]
    if cache:
        from .trees import default_caches

        roots = [path for _, path in default_caches(dict(os.environ))] + allow
    else:
        # A far side that lands in / or a home folder has no working directory to speak
        # of: only its work tree (if any) and what the user allowed count.
        broad = os.path.realpath(cwd) in ("/", os.path.realpath(os.path.expanduser("~")))
        roots = ([] if broad else [cwd]) + allow
        top = work_tree(cwd)
        if top and os.path.realpath(top) not in ("/", os.path.realpath(os.path.expanduser("~"))):
            roots.append(top)
    full = os.path.abspath(os.path.join(cwd, os.path.expanduser(dest)))
    real = os.path.join(os.path.realpath(os.path.dirname(full)), os.path.basename(full))
    if os.path.islink(full):
        real = os.path.realpath(full)
    if ".git" in real.split(os.sep):
        return "%s: not written: inside a .git folder" % dest
    if not Roots(roots).admits(real):
        return "%s: %s (--allow PATH lets restore write there)" % (dest, NOT_HERE)
    here = os.path.realpath(cwd)
    if cache and (here == real or here.startswith(real.rstrip("/") + "/")):
        return "%s: not written: it holds the working directory" % dest
    return None


def digests(path: str) -> Dict[str, Any]:
    """sha256, md5 (people compare it by hand) and size of a regular file."""
    sha, md5, size = hashlib.sha256(), _md5(), 0
    with os.fdopen(open_regular(path), "rb") as fh:
        for block in iter(lambda: fh.read(_BLOCK), b""):
            sha.update(block)
            md5.update(block)
            size += len(block)
    return {"sha256": sha.hexdigest(), "md5": md5.hexdigest(), "size": size}


def _md5() -> Any:
    if sys.version_info >= (3, 9):  # FIPS builds refuse md5 unless it is not for security
        return hashlib.md5(usedforsecurity=False)
    return hashlib.md5()  # pragma: no cover


def stage(args: Dict[str, Any]) -> Dict[str, Any]:
    """A new private file beside ``dest`` to fill (``put``), or ``data`` (base64) written
    to it at once; returns its path."""
    dest = args["dest"]
    why = refused(dest, args, cache=bool(args.get("cache")))
    if why:
        return _fail(why)
    try:
        folder = os.path.dirname(dest) or "."
        os.makedirs(folder, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix="." + os.path.basename(dest) + STAGE, dir=folder)
        with os.fdopen(fd, "wb") as fh:
            if args.get("data"):
                fh.write(base64.b64decode(args["data"]))
    except OSError as exc:
        return _fail("cannot stage %s: %s" % (dest, _why(exc)))
    return {"ok": True, "path": path}


def put(args: Dict[str, Any]) -> Dict[str, Any]:
    """Append a base64 chunk to a staged file (one made by ``stage``, never another)."""
    path = args["path"]
    if STAGE not in os.path.basename(path):
        return _fail("%s: not a staged file" % path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "wb") as fh:
            fh.write(base64.b64decode(args["data"]))
    except OSError as exc:
        return _fail("cannot write %s: %s" % (path, _why(exc)))
    return {"ok": True}


# A rebuild's build and plan folders beside the venv (envguard/recovery/execute.py).
BUILD_MARK, PLAN_MARK, BUILDING = ".envguard-build-", ".envguard-plan-", ".envguard-building"


def discard(args: Dict[str, Any]) -> Dict[str, Any]:
    """Remove staged files and build folders this module made (anything else is left)."""
    for path in args.get("paths", []):
        base = os.path.basename(path.rstrip("/"))
        if not any(mark in base for mark in (STAGE, BUILD_MARK, PLAN_MARK)):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
    return {"ok": True}


def _umask() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def _wanted_mode(recorded: Any) -> Optional[int]:
    """The mode a restored file gets from the one a snapshot recorded, as git checks a file
    out: executable or not, under the umask; never a setuid, setgid or sticky bit from an
    untrusted snapshot. None when nothing (valid) was recorded."""
    if type(recorded) is not int or not 0 <= recorded <= 0o7777:
        return None
    return (0o777 if recorded & 0o111 else 0o666) & ~_umask()


def _set_executable(path: str, wanted: Optional[int]) -> bool:
    """Give ``path`` the executable bits of ``wanted`` when it has the other kind (a script
    that lost its x bit gets it back; its other bits stay the user's); True if it did."""
    if wanted is None:
        return False
    current = stat.S_IMODE(os.lstat(path).st_mode)
    if bool(current & 0o111) == bool(wanted & 0o111):
        return False
    os.chmod(path, wanted)
    return True


def install_file(args: Dict[str, Any]) -> Dict[str, Any]:
    """Put staged content at ``dest`` when its sha256 is ``sha256``: the old file is kept
    beside it (a hard link, so the swap itself is one atomic rename), the new one hashed
    again after the rename; on any mismatch the old file is put back."""
    staged, dest, want, stamp = args["staged"], args["dest"], args["sha256"], args["stamp"]
    why = refused(dest, args)
    if why:
        discard({"paths": [staged]})
        return _fail(why)
    try:
        got = digests(staged)
        try:
            same = stat.S_ISREG(os.lstat(dest).st_mode) and digests(dest)["sha256"] == want
        except OSError:
            same = False
        wanted = _wanted_mode(args.get("mode"))
        if same:  # already the content (a checkout put it back): nothing to displace
            os.unlink(staged)
            return dict(
                got, ok=True, displaced=None, same=True, mode_set=_set_executable(dest, wanted)
            )
        if got["sha256"] != want:
            os.unlink(staged)
            return _fail(
                "the content for %s has sha256 %s, not %s" % (dest, got["sha256"][:12], want[:12])
            )
        displaced = None
        try:
            st = os.lstat(dest)
        except FileNotFoundError:
            st = None
        if st is None:  # a new file: the usual mode, not mkstemp's private one
            os.chmod(staged, wanted if wanted is not None else 0o666 & ~_umask())
        if st is not None:
            if not stat.S_ISREG(st.st_mode):
                os.unlink(staged)
                return _fail("%s is not a regular file; left as it is" % dest)
            os.chmod(staged, stat.S_IMODE(st.st_mode))
            _set_executable(staged, wanted)
            displaced = dest + DISPLACED + stamp
            try:
                os.link(dest, displaced)
            except OSError:
                shutil.copy2(dest, displaced)
        os.replace(staged, dest)
        after = digests(dest)
        if after["sha256"] != want:
            if displaced is not None:
                os.replace(displaced, dest)
            else:
                os.unlink(dest)
            return _fail(
                "%s hashed %s after writing, not %s; put back"
                % (dest, after["sha256"][:12], want[:12])
            )
    except OSError as exc:
        try:
            os.unlink(staged)
        except OSError:
            pass
        return _fail("cannot restore %s: %s" % (dest, _why(exc)))
    return dict(after, ok=True, displaced=displaced)


def file_from_git(args: Dict[str, Any]) -> Dict[str, Any]:
    """Stage the blob at ``head``:``rel`` of the work tree ``repo`` beside ``dest`` (git
    cat-file, hooks and filters off), for install_file; refused unless its sha256 fits."""
    repo, head, rel, dest, want = (
        args["repo"],
        args["head"],
        args["rel"],
        args["dest"],
        args["sha256"],
    )
    why = refused(repo, args) or refused(dest, args)
    if why:
        return _fail(why)
    try:
        proc = run_git(repo, "cat-file", "blob", "%s:%s" % (head, rel))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _fail("git cannot read %s at %s: %s" % (rel, head[:12], exc))
    if proc.returncode != 0:
        return _fail("%s is not in %s at %s" % (rel, repo, head[:12]))
    if hashlib.sha256(proc.stdout).hexdigest() != want:
        return _fail("%s at %s (git) differs from the recorded content" % (rel, head[:12]))
    data = base64.b64encode(proc.stdout).decode()
    return stage({"dest": dest, "data": data, "confine": args.get("confine")})


class _HashingReader:
    """A file read once, hashed as it is read (the archive is checked in the same pass
    that unpacks it)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh, self.sha = fh, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.fh.read(size)
        self.sha.update(data)
        return data

    def rest(self) -> str:
        for _block in iter(lambda: self.read(_BLOCK), b""):
            pass
        return self.sha.hexdigest()


# Deeper than any compile cache nests: a folder chain no tool (rm -r aside) can remove.
_DEPTH = 64


class _TooMuch(Exception):
    pass


def extract(args: Dict[str, Any]) -> Dict[str, Any]:
    """Unpack a cache archive beside ``dest``; when it hashed to ``sha256`` and held exactly
    the recorded files and bytes, rename it into place (the cache it replaces is kept
    beside it). A staged archive is removed after; one in the store is only read.

    Only folders and regular files are written, below the new folder; links, devices and
    names with '..' or a leading '/' are skipped and counted, never followed; unpacking
    stops past the recorded files or bytes (an archive cannot fill the disk)."""
    staged, dest, want, stamp = args["staged"], args["dest"], args["sha256"], args["stamp"]
    limit = (int(args["files"]), int(args["bytes"]))
    why = refused(dest, args, cache=True)
    if why:
        discard({"paths": [staged]})
        return _fail(why)
    new = None
    try:
        parent = os.path.dirname(os.path.abspath(dest))
        os.makedirs(parent, exist_ok=True)
        st = os.statvfs(parent)
        if st.f_bavail * st.f_frsize < limit[1]:
            return _fail(
                "%s: %s free, the cache needs %s; nothing was changed"
                % (parent, _size(st.f_bavail * st.f_frsize), _size(limit[1]))
            )
        new = tempfile.mkdtemp(prefix="." + os.path.basename(dest) + STAGE, dir=parent)
        with os.fdopen(open_regular(staged), "rb") as fh:  # never a FIFO or a device
            reader = _HashingReader(fh)
            try:
                files, size, skipped = _unpack(reader, new, limit)
            except _TooMuch:
                files = size = -1
            got = reader.rest()
        if got != want:
            return _fail("the archive for %s has sha256 %s, not %s" % (dest, got[:12], want[:12]))
        if (files, size) != limit:
            found = "more" if files < 0 else "%d files, %d bytes" % (files, size)
            return _fail(
                "the archive for %s holds %s; %d files, %d bytes were kept"
                % (dest, found, limit[0], limit[1])
            )
        os.chmod(new, 0o777 & ~_umask())  # mkdtemp made it private; a cache is not
        displaced = None
        if os.path.lexists(dest):
            displaced = dest + DISPLACED + stamp
            os.rename(dest, displaced)
        os.rename(new, dest)
        new = None
    except (OSError, tarfile.TarError, EOFError, zlib.error, RecursionError) as exc:
        why = _why(exc) if isinstance(exc, OSError) else "damaged archive (%s)" % exc
        return _fail("cannot restore %s: %s" % (dest, why))
    finally:  # also on Ctrl-C or a signal: no half-unpacked folder is left beside
        if new is not None:
            shutil.rmtree(new, ignore_errors=True)
        if STAGE in os.path.basename(staged):
            try:
                os.unlink(staged)
            except OSError:
                pass
    return {"ok": True, "files": files, "bytes": size, "skipped": skipped, "displaced": displaced}


def _size(n: int) -> str:
    """MB, or KB or bytes below a megabyte (never "0 MB")."""
    if n >= 1 << 20:
        return "%d MB" % (n >> 20)
    return "%d KB" % (n >> 10) if n >= 1 << 10 else "%d bytes" % n


# Name and extended headers are read whole by tarfile: a 2 GiB "name" in a 2 MB archive.
_HEADER_CAP = 64 << 10
_LONG_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
               tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)  # fmt: skip


class _BoundedInfo(tarfile.TarInfo):
    def _proc_member(self, tarfile_: Any) -> Any:
        if self.type in _LONG_TYPES and self.size > _HEADER_CAP:
            raise tarfile.HeaderError("a %d-byte name or extended header" % self.size)
        return super()._proc_member(tarfile_)  # type: ignore[misc]


def _unpack(source: Any, into: str, limit: Any) -> Any:
    files = size = skipped = members = 0
    made = {""}
    with tarfile.open(fileobj=source, mode="r|gz", tarinfo=_BoundedInfo) as tar:
        for member in tar:
            members += 1  # folders and skipped entries count too: a million folders is no cache
            if members > 2 * limit[0] + 10000:
                raise _TooMuch()
            name = member.name
            parts = [p for p in name.split("/") if p not in ("", ".")]
            if not parts or name.startswith("/") or ".." in parts or len(parts) > _DEPTH:
                skipped += 1
                continue
            rel = "/".join(parts)
            if member.isdir():
                _mkdirs(into, rel, made)
            elif member.isreg():
                files += 1
                size += member.size
                if files > limit[0] or size > limit[1]:
                    raise _TooMuch()
                folder = rel.rpartition("/")[0]
                _mkdirs(into, folder, made)
                data = tar.extractfile(member)
                assert data is not None
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                # Never an executable bit from an archive: a cache's .so files are loaded,
                # not run, and a hook or script planted by an archive must not be runnable.
                fd = os.open(os.path.join(into, rel), flags, 0o600 | (member.mode & 0o644))
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(data, out, _BLOCK)
            else:
                skipped += 1
    return files, size, skipped


def _mkdirs(into: str, rel: str, made: Any) -> None:
    """Make ``rel`` and the folders above it below ``into`` (iteratively: a member may be
    nested thousands deep); never through a symlink or over a file."""
    todo = []
    while rel not in made:
        todo.append(rel)
        rel = rel.rpartition("/")[0]
    for folder in reversed(todo):
        path = os.path.join(into, folder)
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            if os.path.islink(path) or not os.path.isdir(path):
                raise OSError(17, "a file where a folder belongs", path) from None
        made.add(folder)


def pack(out: IO[bytes], base: str) -> Dict[str, Any]:
    """Write a gzip tarball of the folders and regular files below ``base`` to ``out``
    (names relative to it, sorted); symlinks and anything else are left out."""
    import gzip

    st = os.lstat(base)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
        # A cache root in a shared folder may be a link planted by another user, leading
        # to files they want read into a store: not followed, not kept.
        raise OSError(1, "a symlink or another user's folder; not kept", base)
    files = size = 0
    # Level 1: a compile cache is mostly binary; higher levels cost seconds for little.
    gz = gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1, mtime=0)
    with gz, tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for folder, dirs, names in os.walk(base):
            dirs.sort()
            rel_folder = os.path.relpath(folder, base)
            if rel_folder != ".":
                info = tarfile.TarInfo(rel_folder)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            for name in sorted(names):
                path = os.path.join(folder, name)
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
                except OSError:
                    continue  # a symlink, or gone since the walk
                with os.fdopen(fd, "rb") as fh:
                    st = os.fstat(fh.fileno())
                    if not stat.S_ISREG(st.st_mode):
                        continue
                    info = tarfile.TarInfo(os.path.relpath(path, base))
                    info.size, info.mode, info.mtime = (
                        st.st_size,
                        stat.S_IMODE(st.st_mode),
                        int(st.st_mtime),
                    )
                    tar.addfile(info, fh)
                files += 1
                size += st.st_size
    return {"ok": True, "files": files, "bytes": size}


# At most this much file content comes back in one answer (model scripts, configs).
READ_CAP = 32 << 20


def read_files(args: Dict[str, Any]) -> Dict[str, Any]:
    """The contents (base64) of regular files, at most READ_CAP bytes in all."""
    from .reading import read_bytes

    out, left = {}, READ_CAP
    for path in args["paths"]:
        try:
            data = read_bytes(path, left)
        except OSError as exc:
            return _fail("cannot read %s: %s" % (path, _why(exc)))
        left -= len(data)
        out[path] = base64.b64encode(data).decode()
    return {"ok": True, "files": out}


def begin_build(args: Dict[str, Any]) -> Dict[str, Any]:
    """Make the build folder (marked as a build from its first moment) and the plan folder."""
    build, plan = args["build"], args["plan"]
    if BUILD_MARK not in os.path.basename(build) or PLAN_MARK not in os.path.basename(plan):
        return _fail("%s: not a build folder" % build)
    try:
        os.makedirs(plan, exist_ok=True)
        os.mkdir(build)
        open(os.path.join(build, BUILDING), "w").close()
    except OSError as exc:
        return _fail("cannot make the build folder: %s" % _why(exc))
    return {"ok": True}


def swap(args: Dict[str, Any]) -> Dict[str, Any]:
    """Put a verified build at the venv's path, the old venv kept as a backup (or removed),
    older backups pruned to ``keep``; put back when the new python does not start."""
    build, venv, stamp = args["build"], args["venv"], args["stamp"]
    if not os.path.isfile(os.path.join(build, BUILDING)):
        return _fail("%s is not an envguard build" % build)
    parent, name = os.path.split(venv.rstrip("/"))
    backup = None
    try:
        if os.path.lexists(venv):
            if os.path.islink(venv) or not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
                return _fail("%s is not a virtualenv; left as it is" % venv)
            backup = os.path.join(parent, name + ".envguard-backup-" + stamp)
            os.rename(venv, backup)
        os.unlink(os.path.join(build, BUILDING))
        os.rename(build, venv)
    except OSError as exc:
        if backup is not None and not os.path.lexists(venv):
            os.rename(backup, venv)
        return _fail("cannot swap in the new venv: %s" % _why(exc))
    check = run({"argv": [os.path.join(venv, "bin", "python"), "-c", "import sys"]})
    if check.get("code") != 0:
        failed = venv + ".envguard-failed"
        shutil.rmtree(failed, ignore_errors=True)
        os.rename(venv, failed)
        if backup is not None:
            os.rename(backup, venv)
        return _fail("the rebuilt venv's python does not start; the old venv is back")
    removed = []
    if backup is not None and args.get("no_backup"):
        shutil.rmtree(backup, ignore_errors=True)
        removed.append(backup)
        backup = None
    prefix = name + ".envguard-backup-"
    others = [
        os.path.join(parent, n)
        for n in os.listdir(parent)
        if n.startswith(prefix) and os.path.join(parent, n) != backup
    ]
    others = [
        p
        for p in others
        if os.path.isdir(p) and not os.path.islink(p) and os.path.isfile(p + "/pyvenv.cfg")
    ]
    others.sort(key=lambda p: os.stat(p).st_mtime, reverse=True)
    for old in others[max(0, int(args.get("keep", 1)) - (backup is not None)) :]:
        shutil.rmtree(old, ignore_errors=True)
        removed.append(old)
    size = tree_bytes(backup) if backup else None
    return {"ok": True, "backup": backup, "backup_bytes": size, "removed": removed}


def list_wheels(args: Dict[str, Any]) -> Dict[str, Any]:
    """The wheel file names in local --find-links folders."""
    names, missing = [], []
    for folder in args.get("folders", []):
        try:
            names += [n for n in os.listdir(folder) if n.endswith(".whl")]
        except OSError:
            if "://" not in folder:
                missing.append(folder)
    if missing:
        return _fail("--find-links %s: no such directory there" % missing[0])
    return {"ok": True, "wheels": sorted(names)}


def tree_bytes(root: str, seconds: float = 10.0) -> int:
    """Bytes below ``root`` (symlinks not followed); -1 past ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    total = 0
    for folder, _dirs, names in os.walk(root):
        if time.monotonic() > deadline:
            return -1
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def room(args: Dict[str, Any]) -> Dict[str, Any]:
    """Free bytes where ``path`` would be written, whether ``path`` exists, and (with
    ``measure``) how many bytes the tree ``measure`` takes."""
    path = args["path"]
    size = tree_bytes(args["measure"]) if args.get("measure") else None
    probe = path
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        st = os.statvfs(probe or "/")
    except OSError as exc:
        return _fail(_why(exc))
    free = st.f_bavail * st.f_frsize
    return {"ok": True, "free": free, "exists": os.path.lexists(path), "bytes": size}


def run(args: Dict[str, Any]) -> Dict[str, Any]:
    """Run an argv (no shell) with ``unset`` variables removed; its exit code and the
    last lines it printed."""
    if args.get("within"):
        why = refused(args["within"], args)
        if why:
            return _fail(why)
    env = {k: v for k, v in os.environ.items() if k not in set(args.get("unset", []))}
    env.update(args.get("set", {}))
    try:
        proc = subprocess.run(
            list(args["argv"]),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=args.get("cwd"),
        )
    except OSError as exc:
        return _fail("cannot run %s: %s" % (args["argv"][0], _why(exc)))
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    return {"ok": True, "code": proc.returncode, "tail": lines[-20:]}


def git(args: Dict[str, Any]) -> Dict[str, Any]:
    """Run git in the work tree ``repo`` (confine.run_git: no filter, hook or other program
    its config names); its exit code and the last lines it printed."""
    repo = args["repo"]
    why = refused(repo, args)
    if why:
        return _fail(why)
    try:
        proc = run_git(repo, *args["argv"], stderr=subprocess.STDOUT, timeout=None)
    except OSError as exc:
        return _fail("cannot run git: %s" % _why(exc))
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    return {"ok": True, "code": proc.returncode, "tail": lines[-20:]}


def find_uv(args: Dict[str, Any]) -> Dict[str, Any]:
    """How to run uv here: ``given``, uv on PATH, or ``python -m uv``; None when none."""
    given = args.get("given")
    candidates = [[given]] if given else []
    which = shutil.which("uv")
    if which:
        candidates.append([which])
    candidates.append([sys.executable, "-m", "uv"])
    for argv in candidates:
        try:
            proc = subprocess.run(
                [*argv, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0:
            return {
                "ok": True,
                "uv": argv,
                "version": proc.stdout.decode("utf-8", "replace").strip(),
            }
        if given:
            break
    return {"ok": True, "uv": None}


OPERATIONS: Dict[str, Callable[[Dict[str, Any]], Dict[str, Any]]] = {
    "stage": stage,
    "put": put,
    "discard": discard,
    "install_file": install_file,
    "file_from_git": file_from_git,
    "extract": extract,
    "room": room,
    "begin_build": begin_build,
    "swap": swap,
    "list_wheels": list_wheels,
    "read_files": read_files,
    "run": run,
    "git": git,
    "find_uv": find_uv,
    "unsafe_place": lambda args: {
        "ok": True,
        "why": unsafe_place(args["path"]),
        "not_python": not_python(args["path"]),
    },
}


def cat(out: IO[bytes], path: str, cap: int) -> None:
    """Write a regular file's bytes to ``out`` as they are read, at most ``cap`` of them
    (OSError EFBIG past it, once ``cap`` went out: the host stops reading there too)."""
    fd = open_regular(path)
    try:
        total = 0
        while True:
            block = os.read(fd, _BLOCK)
            if not block:
                return
            total += len(block)
            if total > cap:
                raise OSError(27, "larger than %d bytes" % cap, path)  # EFBIG
            out.write(block)
    finally:
        os.close(fd)


def main(args: Dict[str, Any]) -> int:
    """Run ``args["op"]`` (``pack`` streams a tarball to stdout, ``cat`` a file's bytes;
    the others print JSON)."""
    op = args.get("op")
    if op == "pack":
        out = sys.stdout.buffer
        pack(out, args["base"])
        out.flush()
        return 0
    if op == "cat":
        out = sys.stdout.buffer
        try:
            cat(out, args["path"], int(args["limit"]))
        except OSError as exc:  # said on stderr: stdout is the file's bytes
            sys.stderr.write("cannot read %s: %s\n" % (args["path"], _why(exc)))
            return 1
        out.flush()
        return 0
    if op not in OPERATIONS:
        sys.stdout.write(json.dumps(_fail("unknown operation %r" % op)))
        return 1
    try:
        result = OPERATIONS[op](args)
    except Exception as exc:  # reported as data, never as a traceback
        result = _fail("%s: %s" % (type(exc).__name__, exc))
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()
    return 0 if result.get("ok") else 1
