"""Installs the target package from (name, source) pairs: the first thing the payload runs.

Its text is sent ahead of the target modules (and exec'd in-process by
``payload.local_package``), so it is written for any Python 3.8 and the standard library,
without f-strings (the payload's version check must parse on older Pythons too).

Compiling the target modules was a large share of every probe. With a ``key`` (a
hash of exactly these sources, computed by the host), the compiled code is kept in the
user's cache folder, ``$XDG_CACHE_HOME/envguard`` (else ``~/.cache/envguard``), one file
per key, interpreter and version, and used by later runs instead of compiling again. The
file is code: it is used only when the folder and the file belong to this user, no one
else can write to them, neither is a symlink, the file is regular and small, and it holds
exactly the modules asked for under their names. Anything else (missing, damaged, foreign)
means compiling as before; a cache that cannot be written is simply not written.
"""

# ruff: noqa: UP006, UP035
import marshal
import os
import stat
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import types
    from typing import List, Optional, Sequence, Tuple

_CODE_CAP = 4 << 20
_CODE_FILES = 8  # the newest kept: the probe's and restore's, for a few envguard versions


def code_folder() -> "Optional[str]":
    base = os.environ.get("XDG_CACHE_HOME") or (
        os.path.join(os.environ["HOME"], ".cache") if os.environ.get("HOME") else None
    )
    if not base or not os.path.isabs(base) or not sys.implementation.cache_tag:
        return None
    return os.path.join(base, "envguard")


def private(st: "os.stat_result") -> bool:
    """This user's own, and no one else can write to it."""
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def private_folder(folder: str) -> bool:
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and private(st)


def read_private(path: str, cap: int) -> "Optional[bytes]":
    """The bytes of ``path`` when it is a regular file of at most ``cap`` bytes, it and its
    folder this user's own and writable by no one else, neither a symlink; else None."""
    if not private_folder(os.path.dirname(path)):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and private(st) and st.st_size <= cap):
            return None
        chunks = []  # type: List[bytes]
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _cached_code(path: str, files: "List[str]") -> "Optional[Tuple[types.CodeType, ...]]":
    """The code objects kept at ``path`` for the modules ``files``, or None."""
    data = read_private(path, _CODE_CAP)
    if data is None:
        return None
    try:
        codes = marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        return None
    if type(codes) is not tuple or len(codes) != len(files):
        return None
    for code, filename in zip(codes, files):
        if type(code) is not _CODE or code.co_filename != filename:
            return None
    return codes


def _keep_code(path: str, codes: "Sequence[types.CodeType]") -> None:
    """Write ``codes`` to ``path`` (atomically, 0600), and prune old files; never fails."""
    keep_private(path, marshal.dumps(tuple(codes)), "code-", ".bin", _CODE_FILES)


# types.CodeType and types.ModuleType, without importing types on the probe's start (-S:
# nothing imported it yet; a fifth of a millisecond before the probe's first step).
_CODE = type(_keep_code.__code__)
_MODULE = type(sys)


def keep_private(path: str, data: bytes, prefix: str, suffix: str, keep: int) -> None:
    """Write ``data`` to ``path`` (atomically, 0600, in a folder only this user can write),
    then keep only the newest ``keep`` files named prefix*suffix there; never fails."""
    folder = os.path.dirname(path)
    tmp = "%s.%d.%d.tmp" % (path, os.getpid(), id(data))
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if not private_folder(folder):
            return
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
        prune(folder, prefix, suffix, keep)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def prune(folder: str, prefix: str, suffix: str, keep: int) -> None:
    """Remove all but the newest ``keep`` of this user's files named prefix*suffix."""
    kept = []  # type: List[Tuple[int, str]]
    for name in os.listdir(folder):
        if name.startswith(prefix) and name.endswith(suffix):
            st = os.lstat(os.path.join(folder, name))
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
                kept.append((st.st_mtime_ns, name))
    for _, name in sorted(kept)[:-keep]:
        os.unlink(os.path.join(folder, name))


def _unpack(packed: str) -> "List[str]":
    """The sources in the payload's packed text: base64 of zlib of them joined by NUL."""
    import binascii
    import zlib

    return zlib.decompress(binascii.a2b_base64(packed)).decode("utf-8").split("\0")


def _envguard_install(
    package: str,
    sources: "Sequence[Tuple[str, str]] | str",
    key: "Optional[str]" = None,
    names: "Optional[Sequence[str]]" = None,
) -> "types.ModuleType":
    """``sources`` as the submodules of a new package ``package`` (so ``from .x import y``
    works), in order; compiled code kept in the user's cache under ``key`` when given.

    ``sources``: (name, source) pairs; or, with ``names``, the payload's packed text of
    their sources (see _unpack), unpacked only when no compiled code is kept: compiling a
    payload of plain string literals cost every probe time, and the packed text is far
    smaller on the wire (docs/benchmarks.md)."""
    if names is None:
        if isinstance(sources, str):
            raise ValueError("packed sources come with their names")
        names = [name for name, _ in sources]
    pkg = _MODULE(package)
    pkg.__path__ = []
    sys.modules[package] = pkg
    files = ["<" + package + "/" + name + ".py>" for name in names]
    folder = code_folder() if key else None
    path = None
    if folder is not None and key:
        tag = "%s-%x" % (sys.implementation.cache_tag, sys.hexversion)
        path = os.path.join(folder, "code-" + key + "-" + tag + ".bin")
    codes = _cached_code(path, files) if path else None
    if codes is None:
        texts = _unpack(sources) if isinstance(sources, str) else [src for _, src in sources]
        if len(texts) != len(files):
            raise ValueError("the payload's sources do not match their names")
        codes = tuple(compile(src, f, "exec", dont_inherit=True) for src, f in zip(texts, files))
        if path:
            _keep_code(path, codes)
    for name, filename, code in zip(names, files, codes):
        mod = _MODULE(package + "." + name)
        mod.__package__ = package
        mod.__file__ = filename
        sys.modules[mod.__name__] = mod
        setattr(pkg, name, mod)
        exec(code, mod.__dict__)
    return pkg
