"""What torch.compile's cache keys are made of, read without importing torch or triton.

- the C++ compiler inductor calls: ``$CXX``, else ``g++`` (torch/_inductor/config.py's
  ``cpp.cxx``), found on PATH, and the first line of its ``--version`` (bounded);
- triton's source key: ``triton_key()`` is triton's version followed by the sha256 of the
  file that defines it, of every module under triton/compiler, triton/backends (in
  ``pkgutil.walk_packages`` order), of ``_C/libtriton.<ext>`` and of every module under
  triton/language. The same recipe is followed here, without importing: the modules are
  read from disk, libtriton (half a GB) is taken at its RECORD's word, which the
  installed-files check holds it to. ``digest`` is the sha256 of that text;
- the GPUs' compute capability (nvidia-smi), the file system each cache folder lies on
  (/proc/self/mountinfo), and who built an inductor cache's FX graph entries: each entry
  is a pickle holding its key's debug lines (``[hash] torch_version: ...``,
  ``system_info[...]``, ``inductor_config[cpp.cxx]``) and its source's header
  (``# torch version: X``, ``# torch git version: Y``), read here as bytes, never unpickled.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import stat
import sys
import time

from .reading import DIGITS, UNSAFE_CHARS, Regex, escaped_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

    from .distcache import DistCache

TRITON_NAMES = ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu")
# A real triton has about 60 modules in these folders, none over a MB: past these bounds
# the tree is not triton's (or is hostile) and the digest is not computed.
TRITON_MODULES = 5000
TRITON_FILE_CAP = 64 << 20
# libtriton is half a GB (3.8.0): hashed only when it is not as its RECORD says.
LIBTRITON_CAP = 1 << 30
TRITON_SECONDS = 5.0
# An inductor cache holds one FX graph entry per compiled graph (tens to thousands):
# this many are read, each up to the cap, within the time; the rest are counted, or not.
ENTRIES_READ = 200
ENTRIES_LISTED = 100000
ENTRY_CAP = 16 << 20
ENTRIES_SECONDS = 3.0
BUILDS_KEPT = 20
MOUNTINFO_CAP = 16 << 20
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
# Packages nest a few levels in triton; a tree nested deeper is not triton's.
TRITON_DEPTH = 32
_UNSAFE = Regex("[" + UNSAFE_CHARS + "]")

# What an FX graph entry says (compiled when an entry is read: most probes read none).
_TORCH_VERSION = rb"\n# torch version: ([0-9A-Za-z.+_-]{1,64})\n"
_TORCH_GIT = rb"\n# torch git version: ([0-9a-f]{7,64})\n"
_TORCH_KEY = rb"\[([a-z0-9]{40,64})\] torch_version: "
_SYSTEM = rb"\] system_info\[hash\]: ([0-9a-f]{16,128})"
_DEVICE = rb"\] system_info\[device\]: \{'name': '([^'\x00-\x1f\x7f]{1,200})'\}"
_TRITON = rb"\] system_info\[version\]: \{[^}]{0,200}?'triton': '([^'\\]{1,40000})'"
_CXX = rb"\] inductor_config\[cpp\.cxx\]: \((?:None|'[^']{0,255}'), '([^'\x00-\x1f\x7f]{1,255})'\)"


def line(text: Optional[str], cap: int = 255) -> Optional[str]:
    """``text`` as one line of at most ``cap`` characters a report may carry: what a
    compiler prints, a variable, or bytes of a cache entry are not to be trusted. (A
    printable text holds no UNSAFE_CHARS: told without re, which every probe would load.)"""
    if text is None:
        return None
    return (text if text.isprintable() else _UNSAFE.sub("?", text))[:cap]


def compiler_name(environ: Dict[str, str]) -> str:
    """The C++ compiler torch inductor calls, as its config reads it at import."""
    return environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")


def compiler_path(name: str, environ: Dict[str, str]) -> Optional[str]:
    """Where ``name`` runs from, as subprocess finds it (a name with a slash is a path)."""
    if "/" in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    for folder in environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder, name)
        if folder and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def compiler(name: str, path: Optional[str], output: Optional[str]) -> Dict[str, Any]:
    """The compiler record: its name, path, and the first line of its ``--version``."""
    first = next((ln.strip() for ln in (output or "").splitlines() if ln.strip()), None)
    error = None
    if path is None:
        error = "not found on PATH"
    elif first is None:
        error = "no answer to --version (it failed, or took over 5 s)"
    return {"name": line(name), "path": line(path, 4096), "version": line(first), "error": error}


def capabilities(output: Optional[str]) -> List[str]:
    """Compute capabilities from nvidia-smi's ``compute_cap`` column ("9.0"), per GPU: each
    1-3 digits, ".", 1-3 digits (told without re: 8 ms of a probe's CPU)."""
    out = []
    for row in (output or "").splitlines():
        value = row.strip()
        major, dot, minor = value.partition(".")
        digits = dot and 0 < len(major) <= 3 and 0 < len(minor) <= 3
        if digits and not (major + minor).strip(DIGITS):
            out.append(value)
    return out


# ---- triton's key ---------------------------------------------------------------------------


class _Unreadable(Exception):
    pass


def _file_sha256(path: str, cap: int = TRITON_FILE_CAP) -> str:
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise _Unreadable("%s: %s" % (path, exc.strerror or exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Unreadable("%s: not a regular file" % path)
        if st.st_size > cap:
            raise _Unreadable("%s: larger than %d bytes" % (path, cap))
        import hashlib

        digest = hashlib.sha256()
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            digest.update(block)
        return digest.hexdigest()
    except OSError as exc:
        raise _Unreadable("%s: %s" % (path, exc.strerror or exc)) from None
    finally:
        os.close(fd)


def _suffixes() -> Tuple[List[str], List[str]]:
    import importlib.machinery as m

    # inspect.getmodulename's order (longest first), and FileFinder's: extensions, source,
    # bytecode.
    every = sorted(m.all_suffixes(), key=len, reverse=True)
    return every, list(m.EXTENSION_SUFFIXES) + list(m.SOURCE_SUFFIXES) + list(m.BYTECODE_SUFFIXES)


def _module_name(filename: str, every: List[str]) -> Optional[str]:
    for suffix in every:
        if filename.endswith(suffix):
            return filename[: -len(suffix)]
    return None


class _Walk:
    """pkgutil.walk_packages over one folder, as triton_key() runs it, without importing:
    a package's ``__path__`` is taken to be its folder."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.every, self.order = _suffixes()
        self.count = 0
        self.listed: List[str] = []  # every folder listed: what the walk's answer rests on

    def _listdir(self, path: str) -> List[str]:
        self.listed.append(path)
        if os.path.islink(path):
            raise _Unreadable("%s: a link (not followed)" % path)
        try:
            names = os.listdir(path)
        except OSError:
            return []
        if len(names) > TRITON_MODULES:
            raise _Unreadable("%s: over %d entries" % (path, TRITON_MODULES))
        return sorted(names)

    def _origin(self, base: str) -> Optional[str]:
        for suffix in self.order:
            if os.path.isfile(base + suffix):
                return base + suffix
        return None

    def modules(self, path: str, depth: int = 0) -> List[str]:
        """The origin of each module, depth first, in walk_packages' order."""
        if depth > TRITON_DEPTH:
            raise _Unreadable("%s: packages nested over %d deep" % (path, TRITON_DEPTH))
        out: List[str] = []
        seen = set()
        for filename in self._listdir(path):
            if time.monotonic() > self.deadline:
                raise _Unreadable("took over %gs" % TRITON_SECONDS)
            name = _module_name(filename, self.every)
            if name == "__init__" or (name is not None and name in seen):
                continue
            full = os.path.join(path, filename)
            package = False
            if not name and "." not in filename and os.path.isdir(full):
                inside = self._listdir(full)
                if not any(_module_name(f, self.every) == "__init__" for f in inside):
                    continue
                name, package = filename, True
            if not name or "." in name:
                continue
            seen.add(name)
            origin = self._origin(
                os.path.join(full, "__init__") if package else os.path.join(path, name)
            )
            if origin is None:
                continue
            self.count += 1
            if self.count > TRITON_MODULES:
                raise _Unreadable("over %d modules" % TRITON_MODULES)
            out.append(origin)
            if package:
                out.extend(self.modules(full, depth + 1))
        return out


def _record_sha256(metadata_dir: str, rel: str) -> Optional[Tuple[str, int]]:
    """(hex sha256, size) of ``rel`` as the distribution's RECORD lists it."""
    import base64
    import csv

    from .reading import RECORD_CAP, read_bytes

    try:
        text = read_bytes(os.path.join(metadata_dir, "RECORD"), RECORD_CAP).decode(
            "utf-8", "replace"
        )
    except OSError:
        return None
    for row in csv.reader(text.splitlines()):
        if len(row) >= 3 and row[0] == rel and row[1].startswith("sha256=") and row[2].isdigit():
            raw = row[1][len("sha256=") :]
            try:
                digest = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
            except ValueError:
                return None
            return digest.hex(), int(row[2])
    return None


def triton_key(
    packages: List[Dict[str, Any]], warnings: List[str], cache: Optional[DistCache] = None
) -> Optional[Dict[str, Any]]:
    """The triton the interpreter imports: its version and the sha256 of its triton_key(),
    kept in the distribution cache under the stamps of every file and folder it was
    computed from (an unchanged triton is not read and hashed again at every probe)."""
    dist = next((p for p in packages if p["name"] in TRITON_NAMES and not p["shadowed"]), None)
    if dist is None:
        return None
    out = {"version": dist["version"], "digest": None, "files": 0, "error": None}
    root = os.path.join(dist["location"], "triton")
    held = _kept_digest(cache, root, dist)
    if held is not None:
        out["digest"], out["files"] = held
        return out
    read: List[str] = []
    try:
        out["digest"], out["files"] = _triton_digest(root, dist, read)
    except _Unreadable as exc:
        why = "triton's key not computed: %s" % exc
        warnings.append(why)
        # It names a file or folder of the venv's, which may be named anything: one line.
        out["error"] = escaped_name(why)[:1024]
        return out
    if cache is not None:
        from .distcache import file_stamp

        # Which files and folders, under RECORD's stamp (a reinstall writes a new one); the
        # digest under theirs.
        cache.keep_lib("TRITON-READ\0" + root, file_stamp(_record_of(dist)), {"paths": read})
        digest = {"version": dist["version"], "digest": out["digest"], "files": out["files"]}
        cache.keep_lib("TRITON\0" + root, _stamps(read), digest)
    return out


def _record_of(dist: Dict[str, Any]) -> str:
    return os.path.join(dist["location"], dist.get("metadata_dir") or "", "RECORD")


def _stamps(paths: List[str]) -> Optional[str]:
    """The stamps of ``paths``, joined; None if one has none (absent, or a link)."""
    from .distcache import file_stamp

    out = []
    for path in paths:
        stamp = file_stamp(path)
        if stamp is None:
            return None
        out.append(stamp)
    return ";".join(out)


def _present(path: str) -> str:
    """``path``, or where it is not, the nearest folder above that is (the one whose
    stamp moves when it appears)."""
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _kept_digest(
    cache: Optional[DistCache], root: str, dist: Dict[str, Any]
) -> Optional[Tuple[str, int]]:
    """(digest, files) kept for the triton at ``root`` when nothing it was computed from
    changed, else None."""
    if cache is None:
        return None
    from .distcache import file_stamp, hex_digits

    read = cache.lib("TRITON-READ\0" + root, file_stamp(_record_of(dist)))
    paths = read.get("paths") if read is not None else None
    if type(paths) is not list or not paths or not all(type(p) is str for p in paths):
        return None
    held = cache.lib("TRITON\0" + root, _stamps(paths))
    if held is None or held.get("version") != dist["version"]:
        return None
    digest, files = held.get("digest"), held.get("files")
    if type(digest) is str and hex_digits(digest, 64) and type(files) is int:
        return digest, files
    return None


def _triton_digest(root: str, dist: Dict[str, Any], read: List[str]) -> Tuple[str, int]:
    """(digest, files hashed) of triton_key(); ``read`` gets every file and folder the
    answer rests on."""
    if os.path.islink(root) or not os.path.isdir(root):
        raise _Unreadable("%s: not a folder" % root)
    # Where triton_key() is defined: runtime/cache.py (3.4 and later), compiler/compiler.py
    # before; its own file is the first hashed.
    frontend = None
    for rel in ("runtime/cache.py", "compiler/compiler.py"):
        path = os.path.join(root, rel)
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError:
            continue
        try:
            from .reading import read_open

            if b"\ndef triton_key(" in read_open(fd, TRITON_FILE_CAP, path):
                frontend = path
                break
        except OSError:
            continue
        finally:
            os.close(fd)
    if frontend is None:
        raise _Unreadable("no triton_key() in runtime/cache.py or compiler/compiler.py")
    walk = _Walk(time.monotonic() + TRITON_SECONDS)
    contents = [_file_sha256(frontend)]
    hashed = [frontend]
    for folder in ("compiler", "backends"):
        modules = walk.modules(os.path.join(root, folder))
        contents += [_file_sha256(p) for p in modules]
        hashed += modules
    import sysconfig

    ext = (sysconfig.get_config_var("EXT_SUFFIX") or ".so").split(".")[-1]
    lib = "triton/_C/libtriton.%s" % ext
    # metadata_dir: the .dist-info folder's name in its site-packages (or a path)
    info = os.path.join(dist["location"], dist.get("metadata_dir") or "")
    recorded = _record_sha256(info, lib)
    try:
        size = os.lstat(os.path.join(dist["location"], lib)).st_size
    except OSError:
        raise _Unreadable("%s: missing" % lib) from None
    if recorded is None or recorded[1] != size:
        # Not as its RECORD says: hashed here, as triton would (bounded by the file cap).
        contents.append(_file_sha256(os.path.join(dist["location"], lib), LIBTRITON_CAP))
    else:
        contents.append(recorded[0])
    modules = walk.modules(os.path.join(root, "language"))
    contents += [_file_sha256(p) for p in modules]
    # The files looked into for triton_key() too (the frontend is one of them), RECORD and
    # libtriton (its hash or its size against RECORD's), and every folder listed.
    tried = [os.path.join(root, rel) for rel in ("runtime/cache.py", "compiler/compiler.py")]
    read += [_present(p) for p in tried[: tried.index(frontend) + 1]]
    read += hashed[1:] + modules + [os.path.join(info, "RECORD")]
    read += [os.path.join(dist["location"], lib), *walk.listed]
    text = str(dist["version"]) + "-".join(contents)
    return _sha256(text.encode("utf-8")), len(contents)


# ---- file systems ---------------------------------------------------------------------------


def mounts() -> List[Tuple[str, str]]:
    """(mount point, file system type) of this process, longest mount point first."""
    from .reading import read_bytes

    try:
        return parse_mountinfo(read_bytes("/proc/self/mountinfo", MOUNTINFO_CAP))
    except OSError:
        return []


def parse_mountinfo(raw: bytes) -> List[Tuple[str, str]]:
    """(mount point, file system type) of each line of a mountinfo file, longest first."""
    out = []
    for row in raw.decode("utf-8", "replace").splitlines():
        head, sep, tail = row.partition(" - ")
        fields = head.split(" ")
        kind = tail.split(" ")[0]
        if not sep or len(fields) < 5 or not kind:
            continue
        point = fields[4]
        if "\\" in point:  # an escaped byte (\040, a space): re is loaded only then
            import re

            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point)
        out.append((point, line(kind, 64) or "?"))
    out.sort(key=lambda m: len(m[0]), reverse=True)
    return out


def filesystem(path: str, table: List[Tuple[str, str]]) -> Optional[str]:
    """The type of the file system ``path`` (or its nearest existing parent) lies on."""
    full = os.path.realpath(path)
    for point, kind in table:
        if full == point or full.startswith(point.rstrip("/") + "/"):
            return kind
    return None


# ---- who built an inductor cache ------------------------------------------------------------


def _sha256(data: bytes) -> str:
    import hashlib  # here: loading it (and OpenSSL) is a probe's cost where nothing is hashed

    return hashlib.sha256(data).hexdigest()


def _text(raw: Optional[bytes]) -> Optional[str]:
    return None if raw is None else line(raw.decode("utf-8", "replace"))


def _entry_build(data: bytes) -> Dict[str, Any]:
    import re

    def first(pattern: bytes) -> Optional[bytes]:
        match = re.search(pattern, data)
        return match.group(1) if match else None

    triton = first(_TRITON)
    return {
        "torch": _text(first(_TORCH_VERSION)),
        "git_version": _text(first(_TORCH_GIT)),
        "torch_key": _text(first(_TORCH_KEY)),
        "system": _text(first(_SYSTEM)),
        "cxx": _text(first(_CXX)),
        "device": _text(first(_DEVICE)),
        "triton": None if triton is None else _sha256(triton),
    }


def _read_entry(dir_fd: int, name: str) -> Optional[bytes]:
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None  # a link (O_NOFOLLOW) or gone
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        total = 0
        while total < ENTRY_CAP:
            block = os.read(fd, min(1 << 20, ENTRY_CAP - total))
            if not block:
                break
            chunks.append(block)
            total += len(block)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _listdir_fd(path: str, dir_fd: Optional[int] = None) -> Tuple[Optional[int], List[str]]:
    try:
        fd = os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None, []
    try:
        return fd, sorted(os.listdir(fd))
    except OSError:
        os.close(fd)
        return None, []


def cache_builds(root: str, warnings: List[str]) -> List[Dict[str, Any]]:
    """Who built the FX graph entries under ``root``/fxgraph: one record per distinct
    (torch, git, torch key, system, compiler, device, triton), with its entry count. Links
    are not followed; the walk is bounded (a warning says when it stopped)."""
    if not hasattr(os, "O_DIRECTORY") or os.open not in os.supports_dir_fd:
        return []
    top, shards = _listdir_fd(os.path.join(root, "fxgraph"))
    if top is None:
        return []
    deadline = time.monotonic() + ENTRIES_SECONDS
    counts: Dict[Tuple[Any, ...], int] = {}
    read = listed = 0
    cut = None
    try:
        for shard in shards:
            shard_fd, keys = _listdir_fd(shard, top)
            if shard_fd is None:
                continue
            try:
                for key in keys:
                    key_fd, entries = _listdir_fd(key, shard_fd)
                    if key_fd is None:
                        continue
                    try:
                        for entry in entries:
                            listed += 1
                            if listed > ENTRIES_LISTED or time.monotonic() > deadline:
                                cut = "stopped after %d entries (limits: %d, %gs)" % (
                                    listed - 1,
                                    ENTRIES_LISTED,
                                    ENTRIES_SECONDS,
                                )
                                raise StopIteration
                            if read >= ENTRIES_READ:
                                continue  # counted, not read
                            data = _read_entry(key_fd, entry)
                            if data is None:
                                continue
                            read += 1
                            build = _entry_build(data)
                            ident = tuple(sorted(build.items()))
                            counts[ident] = counts.get(ident, 0) + 1
                    finally:
                        os.close(key_fd)
            finally:
                os.close(shard_fd)
    except StopIteration:
        pass
    finally:
        os.close(top)
    if cut:
        warnings.append("%s: FX graph entries %s; builds are from those read" % (root, cut))
    builds = []
    for ident, count in counts.items():
        build = dict(ident)
        build["entries"] = count
        builds.append(build)
    builds.sort(key=lambda b: (-b["entries"], str(b["torch"]), str(b["torch_key"])))
    return builds[:BUILDS_KEPT]
