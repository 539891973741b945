"""What runs beyond the RECORD rows installed.py checks: bytecode Python would load instead of
its source, start-up code that is a folder or bytecode, console scripts in ``bin/``, and
site-packages folders reached through a link out of the venv.

Bytecode. For a module ``F/m.py``, Python loads ``F/__pycache__/m.<cache_tag>.pyc`` without
reading the source whenever the pyc's header says it is current: a timestamp pyc whose
recorded mtime and size are the source's, a checked hash pyc whose hash is the source's, or
an unchecked hash pyc (never compared with its source). A pyc is drift when Python would
load it and it is not what compiling that source gives: a planted pyc only has to copy the
source's mtime and size into its header. What compiling gives is checked by compiling the
source (marshal's bytes first; the code objects compared when the bytes differ, which two
compilers' reference counts can cause). A pyc whose header is stale is never loaded (Python
compiles the source again) and a pyc in ``__pycache__`` whose source is gone is never
loaded either (PEP 3147): neither is drift. A pyc beside its module's folder entries
(``F/m.pyc``, no ``m.py``) is loaded as a sourceless module: installed.py lists such files.
A pyc RECORD lists with a hash is checked against RECORD like every other file (pip lists
the pycs it compiles with none, uv lists none: those are compared with their source).
The verdict for an unchanged pyc and source (inode, size, mtime and ctime of both; no ctime
for a source with several links) is kept in the distribution cache, so a venv is compiled
once, not at each probe (docs/benchmarks.md has the cost). Once every pyc of a
``__pycache__`` folder was found its source's, the folder's verdict replaces theirs: its
pyc names under the folder's own stamp (adding, removing or renaming a pyc changes it), and
one digest of the stamps of those pycs and their sources (rewriting one in place changes
it). An unchanged folder then costs one ``lstat`` a pyc, no listing and no Python work a
file: the kept folders of a distribution are told together, in one pass over their pycs
(BytecodeScan._unsettled); the stamps of the sources are the ones the RECORD check took
(installed.py).
"""

# ruff: noqa: UP006, UP035, UP045, B905
# (B905: zip(strict=) is 3.10+; the target runs 3.8)
from __future__ import annotations

import os
import stat
import sys
import time
from operator import methodcaller, mul

from .pycstamps import (
    CTIME,
    MTIME,
    NLINK,
    ONE,
    batch_paths,
    folder_digest,
    pyc_paths,
    stamp_columns,
    take_stamps,
    text_digest,
)
from .reading import RECORD_CAP, UNSAFE_CHARS, Regex, read_bytes
from .records import package_folder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Set, Tuple

    from .distcache import DistCache

# Bytecode and sources larger than these are not compiled (the largest real modules are a
# few MB); counted as not checked.
PYC_CAP = 64 << 20
SOURCE_CAP = 16 << 20
# A torch venv whose modules were all imported (or compiled at install) holds thousands of
# pycs. The quick check compiles for at most this long per run (then says how many were
# left); verdicts are kept, so the next run goes on where this one stopped. Newest first:
# a pyc planted since the last run is among the first compared. Short, because every
# snapshot, diff and check pays it until the venv is done (issue 33's budget).
QUICK_COMPILE_SECONDS = 3.0
# Pycs of this interpreter compared per __pycache__ folder (a real one holds a few
# hundred); past it they are counted as not checked and the folder keeps no verdict.
MAX_ENTRIES = 100000
# Per-item warnings kept (the rest counted in one line).
MAX_WARNED = 20
# Pycs of kept folders told together (BytecodeScan._unsettled).
BATCH = 512
# Start-up modules Python's site imports when they exist anywhere on sys.path.
STARTUP = ("sitecustomize", "usercustomize")
# A pyc is named after its source's file, whatever that name is (a Unicode identifier,
# ``step-2`` or ``2nd``, which importlib imports): any stem that is one line of text.
_PYC = Regex("^([^./" + UNSAFE_CHARS + "\ud800-\udfff]+)\\.([^./]+?)(?:\\.opt-([12]))?\\.pyc$")
# A console script's RECORD row: ../../../bin/NAME (from <venv>/lib/pythonX.Y/site-packages).
_SCRIPT = Regex(r'(?m)^\.\./\.\./\.\./bin/([^\\/",\r\n\x00]+),([a-z0-9]+=[^,\r\n]*),([0-9]+)\r?$')
_NOT_IN_SCRIPT_NAME = ("\\", "/", '"', ",", "\r", "\n", "\x00")
_FLAGS_KNOWN = 0b11


class Bytecode:
    """The pycs Python would load that are not their source's: per distribution (by index)
    and at the top of site-packages (no distribution owns the source)."""

    def __init__(self) -> None:
        self.by_dist: Dict[int, List[str]] = {}
        self.top: List[str] = []
        self.unchecked = 0  # over a cap or the time budget


def bytecode_folders(
    folders: Dict[str, Optional[int]], owner: Dict[str, int], top: Optional[bool] = None
) -> List[str]:
    """The folders whose ``__pycache__`` check_bytecode looks at: each real folder the
    RECORD rows name (``folders``: folder -> mtime_ns, None below a symlink: not read), and
    the top of site-packages when a RECORD names a file there (``top``, when the caller
    knows it; else told from ``owner``'s paths)."""
    names = {f for f, mtime in folders.items() if mtime is not None and not in_cache_dir(f)}
    if top is None:
        top = any("/" not in path for path in owner)
    if "" in names or top:
        names.add("")
    return sorted(names)


class BytecodeScan:
    """The pycs of this interpreter Python would load from the ``__pycache__`` of the
    folders given to ``scan()``, compared with their sources by ``finish()``, the most
    recently changed first (a planted file is among them; ctime cannot be put back).
    ``stats_of``: the lstat of files the RECORD check took, by path (relative to ``site``).
    ``listed``: the folders whose ``__pycache__`` holds a file ``owner`` names, when the
    caller knows them (else each pyc is looked up in ``owner``)."""

    def __init__(
        self,
        site: str,
        owner: Dict[str, int],
        cache: Optional[DistCache],
        stats_of: Optional[Dict[str, os.stat_result]] = None,
        listed: Optional[Set[str]] = None,
    ) -> None:
        self.site, self.owner, self.cache, self.listed = site, owner, cache, listed
        # what the pycs' lstat paths start with: "" when the process works in ``site``
        self.at = site + "/"
        # the RECORD check's dict itself (filled for each distribution after this is made)
        self.stats_of = stats_of if stats_of is not None else {}
        self.tag = getattr(sys.implementation, "cache_tag", None)  # None: no bytecode at all
        self.pending: List[_Pending] = []
        self.early: List[Tuple[str, str, str]] = []  # (pyc, source, folder) told uncompiled
        self.clean: Dict[str, Tuple[str, str, str, int]] = {}  # what keeps a folder's verdict
        self.over = 0  # pycs past MAX_ENTRIES in a folder: not checked

    def scan(self, folders: List[str]) -> None:
        if not self.tag:
            return
        for folder in self._unsettled(folders):
            found_here, kept, over = _candidates(
                self.site, folder, self.owner, self.tag, self.cache, self.pending, self.stats_of
            )
            self.over += over
            for rel, source, verdict in found_here:
                if not verdict:
                    self.early.append((rel, source, folder))
            if kept is not None and all(verdict for _, _, verdict in found_here):
                self.clean[folder] = kept

    def _unsettled(self, folders: List[str]) -> List[str]:
        """``folders`` but those whose kept verdict holds as it is (the folder's stamp, its
        pycs' and their sources' all unchanged), told a batch of folders at a time (up to
        BATCH pycs: the Python work is done a batch, not a file, and the ``lstat`` results
        held stay few): one ``lstat`` of each folder and each pyc. What is left (no verdict
        kept, a stamp moved, anything unusual) is for _candidates to look at, folder by
        folder, as it did before any verdict was kept."""
        if self.cache is None:
            return folders
        site, cache = self.site, self.cache
        held: List[Tuple[str, str, str, str]] = []  # folder, its path and "/", names, digest
        settled: Set[str] = set()
        count = 0
        for folder in folders:
            lead = folder + "/" if folder else ""
            try:
                st = os.lstat(self.at + lead + "__pycache__")
            except OSError:
                settled.add(folder)  # no bytecode there (_candidates would find none)
                continue
            kept = None
            if stat.S_ISDIR(st.st_mode):
                key = "%s/%s__pycache__\0%d,%d,%d" % (
                    site,
                    lead,
                    st.st_ino,
                    st.st_mtime_ns,
                    st.st_ctime_ns,
                )
                kept = cache.pyc_folder(key)
            if kept is None or "/" in kept[0]:
                continue
            held.append((folder, lead, kept[0], kept[1]))
            count += kept[0].count("\n") + 1 if kept[0] else 0
            if count >= BATCH:
                self._settle(held, settled)
                held, count = [], 0
        self._settle(held, settled)
        return [folder for folder in folders if folder not in settled]

    def _settle(self, held: List[Tuple[str, str, str, str]], settled: Set[str]) -> None:
        """Add to ``settled`` each ``held`` folder whose pycs and sources are stamped as kept
        (none when a pyc RECORD lists is among them, or one is gone: one at a time then)."""
        if not held:
            return
        tag = str(self.tag)
        made = batch_paths([(names, lead) for _, lead, names, _ in held], tag)
        if made is None:  # a name that is not this interpreter's plain pyc: folder by folder
            texts: List[str] = []
            rels: List[str] = []
            sources: List[str] = []
            for _, lead, names, _ in held:
                folder_rels, folder_sources = pyc_paths(names, lead, tag)
                texts.append("\n".join(folder_rels))
                rels += folder_rels
                sources += folder_sources
        else:
            texts, rels, sources = made
        listed = self.listed
        if (listed is None or not listed.isdisjoint([folder for folder, _, _, _ in held])) and (
            not self.owner.keys().isdisjoint(rels)
        ):
            return
        stamps = take_stamps(self.at, rels, sources, self.stats_of)
        columns = None if stamps is None else stamp_columns(*stamps)
        if columns is None:
            return
        at = 0
        for (folder, _, names, digest), text in zip(held, texts):
            count = names.count("\n") + 1 if names else 0
            if text_digest(text, count, columns, at) == digest:
                settled.add(folder)
            at += count

    def finish(self, found: Bytecode, deadline: List[float]) -> None:
        """Compile what is pending (until ``deadline``: one float shared by all sites;
        quick: a time; deep: -1, none), name every drift in ``found``, keep the verdicts
        of the folders found clean."""
        import warnings

        owner, clean = self.owner, self.clean
        found.unchecked += self.over
        # Folders that hold a module RECORD lists, by owner: a pyc of an unowned source there
        # belongs to whoever owns the folder (made only when there is drift to name).
        folder_owner: Dict[str, int] = {}
        if self.early or self.pending:
            for path, index in owner.items():
                folder_owner.setdefault(path.rpartition("/")[0], index)
        for rel, source, folder in self.early:
            _found(found, rel, owner.get(source), folder_owner, folder)
        self.pending.sort(key=lambda p: -p.ctime_ns)
        with warnings.catch_warnings():  # compile() warns on stderr about the target's sources
            warnings.simplefilter("ignore")
            for item in self.pending:
                if deadline[0] >= 0 and time.monotonic() > deadline[0]:
                    found.unchecked += 1
                    clean.pop(item.folder, None)
                    continue
                same = _compiled_same(item, self.cache)
                if not same:
                    clean.pop(item.folder, None)
                if same is None:
                    found.unchecked += 1
                elif not same:
                    _found(found, item.rel, owner.get(item.source_rel), folder_owner, item.folder)
        if self.cache is not None:
            for key, names_text, digest, newest in clean.values():
                self.cache.keep_pyc_folder(key, names_text, digest, newest)


def check_bytecode(
    site: str,
    folders: Dict[str, Optional[int]],
    owner: Dict[str, int],
    cache: Optional[DistCache],
    deep: bool,
    found: Bytecode,
    deadline: List[float],
    stats_of: Optional[Dict[str, os.stat_result]] = None,
) -> None:
    """Every ``__pycache__`` of the folders RECORD rows name (and of the top of ``site``),
    in one scan (see BytecodeScan)."""
    scan = BytecodeScan(site, owner, cache, stats_of)
    scan.scan(bytecode_folders(folders, owner))
    scan.finish(found, deadline)


def in_cache_dir(folder: str) -> bool:
    return folder == "__pycache__" or folder.endswith("/__pycache__")


class _Pending:
    """A pyc Python would load, to be compared with its source by compiling it."""

    def __init__(self, rel: str, source_rel: str, site: str, opt: int, key: str) -> None:
        self.rel, self.source_rel, self.opt, self.key = rel, source_rel, opt, key
        self.full, self.source = site + "/" + rel, site + "/" + source_rel
        self.folder = rel.rpartition("/__pycache__/")[0]
        self.ctime_ns = self.settled = 0


def _candidates(
    site: str,
    folder: str,
    owner: Dict[str, int],
    tag: str,
    cache: Optional[DistCache],
    pending: List[_Pending],
    stats_of: Optional[Dict[str, os.stat_result]],
) -> Tuple[List[Tuple[str, str, bool]], Optional[Tuple[str, str, str, int]], int]:
    """(pyc, its source, verdict) told without compiling (a link is drift); the pycs that
    need a compile are added to ``pending``. With it, what keeps the folder's verdict once
    every pyc in it is found its source's: (key, names, digest, newest change), or None;
    and how many of its pycs were past MAX_ENTRIES. A folder whose verdict was kept and
    whose digest is unchanged gives nothing. The folder's own change counts among the
    newest (a file system with coarse times: a pyc added in the tick it was listed in
    leaves its stamp as it was; see distcache's quiet time)."""
    lead = folder + "/" if folder else ""
    where = site + "/" + lead + "__pycache__"
    try:
        st = os.lstat(where)
    except OSError:
        return [], None, 0
    if stat.S_ISLNK(st.st_mode):  # Python follows it: what it leads to is loaded, unread here
        return [(lead + "__pycache__", lead + "__init__.py", False)], None, 0
    if not stat.S_ISDIR(st.st_mode):
        return [], None, 0
    key = "%s\0%d,%d,%d" % (where, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    held = cache.pyc_folder(key) if cache is not None else None
    if held is not None and "/" not in held[0]:
        # The folder's entries are as they were: its pycs of this interpreter are these.
        names = held[0].split("\n") if held[0] else []
        rels, sources = pyc_paths(held[0], lead, tag)
        if owner.keys().isdisjoint(rels):
            stamps = take_stamps(site + "/", rels, sources, stats_of or {})
            columns = None if stamps is None else stamp_columns(*stamps)
            if columns is not None and folder_digest(rels, columns) == held[1]:
                return [], None, 0  # every pyc and source as when all were found the same
        entries = names
    else:
        try:
            listed = os.listdir(where)
        except OSError:
            return [], None, 0
        # This interpreter's names only, then the cap: names that sort first (a flood of
        # files Python never loads) must not push a pyc it loads out of the listing.
        ends = tuple(".%s%s.pyc" % (tag, opt) for opt in ("", ".opt-1", ".opt-2"))
        entries = sorted(filter(methodcaller("endswith", ends), listed))
    over = max(0, len(entries) - MAX_ENTRIES)
    entries = entries[:MAX_ENTRIES]
    names, todo = [], []
    for name in entries:
        parts = pyc_name(name)
        if parts is None or parts[1] != tag:
            continue  # another interpreter's, or no module's
        names.append(name)
        rel = lead + "__pycache__/" + name
        if rel in owner:
            continue  # RECORD lists it with a hash: checked against RECORD
        todo.append((rel, lead + parts[0] + ".py", parts[2]))
    out = []
    for rel, source, opt in todo:
        verdict = _screen(site, rel, source, opt, cache, pending)
        if verdict is not None:
            out.append((rel, source, verdict))
    if len(todo) != len(names) or over:
        return out, None, over  # a pyc RECORD lists: its folder is looked at every time
    rels = [t[0] for t in todo]
    stamps = take_stamps(site + "/", rels, [t[1] for t in todo], stats_of or {})
    columns = None if stamps is None else stamp_columns(*stamps)
    if stamps is None or columns is None:
        return out, None, 0
    pycs, sources = stamps
    newest = max(
        max(map(CTIME, pycs), default=0),
        max(map(MTIME, sources), default=0),
        max(map(mul, map(CTIME, sources), map(ONE, map(NLINK, sources))), default=0),
        st.st_ctime_ns,
    )
    return out, (key, "\n".join(names), folder_digest(rels, columns), newest), 0


def pyc_name(name: str) -> Optional[Tuple[str, str, int]]:
    """(module, cache tag, optimization level) of a pyc's file name as _PYC reads it, else
    None; a printable name (the common case) by string operations: a folder a RECORD lists
    pycs in is read at every probe, where re is not loaded (reading.Regex)."""
    if not name.isprintable():  # every character _PYC refuses in a stem is unprintable
        match = _PYC.match(name)
        return None if match is None else (match[1], match[2], int(match[3] or 0))
    parts = name[:-4].split(".") if name.endswith(".pyc") and "/" not in name else []
    if len(parts) == 3 and parts[2] in ("opt-1", "opt-2"):
        return (parts[0], parts[1], int(parts[2][-1])) if parts[0] and parts[1] else None
    return (parts[0], parts[1], 0) if len(parts) == 2 and parts[0] and parts[1] else None


def _screen(
    site: str,
    rel: str,
    source: str,
    opt: int,
    cache: Optional[DistCache],
    pending: List[_Pending],
) -> Optional[bool]:
    """True: Python would not load the pyc at ``rel``, or it was found the source's before;
    False: Python would load it and it is a link; None: added to ``pending``."""
    pyc, src = site + "/" + rel, site + "/" + source
    try:
        src_st = os.lstat(src)
        pyc_st = os.lstat(pyc)
    except OSError:
        return True  # no source: never loaded from __pycache__ (PEP 3147)
    if not stat.S_ISREG(src_st.st_mode):
        return True  # a linked or odd source: RECORD's check names it
    if stat.S_ISLNK(pyc_st.st_mode):
        return False  # Python follows the link; nothing is read through it here
    if not stat.S_ISREG(pyc_st.st_mode):
        return True
    # A source uv links from its cache has its ctime moved by every venv linked to it: its
    # mtime stands for it (as installed.py keys a file with several links).
    src_ctime = src_st.st_ctime_ns if src_st.st_nlink == 1 else -1
    key = "pyc\0%s\0%d,%d,%d,%d\0%d,%d,%d,%d" % (
        pyc,
        pyc_st.st_ino,
        pyc_st.st_size,
        pyc_st.st_mtime_ns,
        pyc_st.st_ctime_ns,
        src_st.st_ino,
        src_st.st_size,
        src_st.st_mtime_ns,
        src_ctime,
    )
    if cache is not None and cache.was_verified(key):
        return True
    try:
        fd = os.open(pyc, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            header = os.read(fd, 16)
        finally:
            os.close(fd)
    except OSError:
        return True  # unreadable to us; Python (the same user) cannot load it either
    if _loads_without_source(header, src_st) is None:
        return True  # stale, or not this interpreter's bytecode: compiled again
    item = _Pending(rel, source, site, opt, key)
    item.ctime_ns = pyc_st.st_ctime_ns
    item.settled = max(pyc_st.st_ctime_ns, src_ctime, src_st.st_mtime_ns)
    pending.append(item)
    return None


def _compiled_same(item: _Pending, cache: Optional[DistCache]) -> Optional[bool]:
    """Whether the pending pyc is what its source compiles to (a checked hash pyc of
    another source is never loaded: True); None when a cap stops the check."""
    try:
        data = read_bytes(item.full, PYC_CAP)
        source = read_bytes(item.source, SOURCE_CAP)
    except OSError as exc:
        return None if exc.errno == 27 else True  # EFBIG: over a cap
    if data[4:8] == b"\x03\x00\x00\x00" and not _hash_matches(data, source):
        return True  # a checked hash pyc of another source: compiled again
    same = _same_code(data[16:], source, item.source, item.opt)
    if same and cache is not None:
        cache.keep_verified(item.key, item.settled)
    return same


def _found(
    found: Bytecode, rel: str, index: Optional[int], folder_owner: Dict[str, int], folder: str
) -> None:
    if index is None:
        index = folder_owner.get(folder) if folder else None
    if index is None:
        found.top.append(rel)
    else:
        found.by_dist.setdefault(index, []).append(rel)


def _loads_without_source(data: bytes, src_st: os.stat_result) -> Optional[bool]:
    """Whether Python's import would take this pyc's code: None if not (wrong magic, bad
    flags, a stale timestamp); True if its header alone says so (a timestamp pyc matching
    the source, an unchecked hash pyc); False if the source's hash must match too."""
    from importlib.util import MAGIC_NUMBER

    if len(data) < 16 or data[:4] != MAGIC_NUMBER:
        return None
    flags = int.from_bytes(data[4:8], "little")
    if flags & ~_FLAGS_KNOWN:
        return None
    if flags & 1:  # hash-based: checked when bit 1 is set (the default mode's rule)
        return not flags & 2
    mtime = int.from_bytes(data[8:12], "little")
    size = int.from_bytes(data[12:16], "little")
    if mtime != int(src_st.st_mtime) & 0xFFFFFFFF or size != src_st.st_size & 0xFFFFFFFF:
        return None
    return True


def _hash_matches(data: bytes, source: bytes) -> bool:
    from importlib.util import source_hash

    return data[8:16] == source_hash(source)


def _same_code(body: bytes, source: bytes, path: str, optimize: int) -> Optional[bool]:
    """Whether ``body`` (a pyc after its header) is what compiling ``source`` gives."""
    import marshal

    try:
        code = compile(source, path, "exec", dont_inherit=True, optimize=optimize)
    except (SyntaxError, ValueError):
        return False  # no compiler made this pyc from that source
    except (RecursionError, MemoryError):
        return None
    if marshal.dumps(code) == body:
        return True
    try:
        loaded = marshal.loads(body)
    except Exception:  # (a malformed code object: SystemError) Python's import fails on it
        return False
    return type(loaded) is type(code) and loaded == code


def script_rows(
    record_path: str, key: Optional[str], cache: Optional[DistCache], text: Optional[str]
) -> List[Tuple[str, str, str]]:
    """(name, hash, size) of the console scripts a RECORD lists in ``bin/``: from ``text``
    (RECORD just read), else kept in ``cache``, else read again."""
    held_key = key.replace("\0", "|scripts\0", 1) if key is not None else None
    if text is None and cache is not None and held_key is not None:
        held = cache.record_rows(held_key)
        if held is not None:
            rows = _held(held)
            if rows is not None:
                return rows
    if text is None:
        try:
            text = read_bytes(record_path, RECORD_CAP).decode("utf-8", "surrogateescape")
        except OSError:
            return []
    rows = _SCRIPT.findall(text) if "../../../bin/" in text else []
    if cache is not None and held_key is not None:
        cache.keep_record_rows(held_key, ["\n".join(r[i] for r in rows) for i in range(3)])
    return rows


def _held(held: List[str]) -> Optional[List[Tuple[str, str, str]]]:
    if held == ["", "", ""]:
        return []
    names, hashes, sizes = (part.split("\n") for part in held)
    if not len(names) == len(hashes) == len(sizes) or not "".join(sizes).isdigit():
        return None
    rows = list(zip(names, hashes, sizes))
    return rows if all(_script_row(*row) for row in rows) else None


def _script_row(name: str, digest: str, size: str) -> bool:
    """A row _SCRIPT's groups could be, told by string operations: every probe checks the
    kept rows before its first step, where re is not loaded (reading.Regex)."""
    algorithm, equals, value = digest.partition("=")
    return (
        bool(name)
        and not any(map(name.__contains__, _NOT_IN_SCRIPT_NAME))
        and bool(equals)
        and algorithm.isascii()
        and algorithm.isalnum()
        and algorithm == algorithm.lower()
        and not any(map(value.__contains__, (",", "\r", "\n")))
        and size.isascii()
        and size.isdigit()
    )


def bin_folder(site: str) -> Optional[str]:
    """``<venv>/bin`` for a site-packages at ``<venv>/lib/pythonX.Y/site-packages`` (built
    from the path's text, never by resolving ``..``), when it is a real folder."""
    parts = site.rstrip("/").rsplit("/", 3)
    if len(parts) != 4 or parts[3] != "site-packages" or not parts[2].startswith("python"):
        return None
    folder = (parts[0] or "") + "/bin"
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return None
    except OSError:
        return None
    return folder


def check_scripts(
    site: str,
    rows: List[Tuple[str, str, str]],
    result: Dict[str, Any],
    same: Callable[[str, str, os.stat_result], Optional[bool]],
) -> None:
    """Each console script RECORD lists, of RECORD's size and, by ``same``, its bytes
    (installed.hashed_same: hashed unless a verdict is kept for its stamp; an installer
    writes a script itself, so its times say nothing of when it was installed). Paths are
    RECORD's (``../../../bin/NAME``)."""
    if not rows:
        return
    folder = bin_folder(site)
    if folder is None:
        return
    for name, digest, size in rows:
        if name in (".", "..") or not name.strip():
            continue
        rel = "../../../bin/" + name
        full = folder + "/" + name
        try:
            st = os.lstat(full)
        except OSError as exc:
            if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
                result["missing"].append(rel)
            continue
        result["checked"] += 1
        if (
            not stat.S_ISREG(st.st_mode)
            or str(st.st_size) != size
            or same(full, digest, st) is False
        ):
            result["modified"].append(rel)


def unowned_startup(
    site: str, names: List[str], owner: Dict[str, int], claimed: Optional[Set[str]] = None
) -> List[str]:
    """Entries at the top of ``site`` no RECORD claims that run at start-up or on import and
    that the file rule (a regular ``.py``/``.pth``/``.so``) misses: a ``sitecustomize`` or
    ``usercustomize`` package (a folder), a package folder none of ``claimed`` names (the
    RECORDs' folders, and what an egg-info install without one names), a sourceless ``.pyc``,
    or a link (Python follows it; it is named, not read). Folders end in ``/``."""
    out: List[str] = []
    for name in names:
        if name in owner:
            continue
        try:
            mode = os.lstat(site + "/" + name).st_mode
        except OSError:
            continue
        if name in STARTUP and (stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            if not _owned_below(name, owner):
                out.append(name + "/")
        elif claimed is not None and stat.S_ISDIR(mode) and name not in claimed:
            if package_folder(site + "/" + name, name):
                out.append(name + "/")  # `import name` runs its code
        elif name.endswith(".pyc") and stat.S_ISREG(mode):
            out.append(name)
        elif (
            stat.S_ISLNK(mode)
            and not name.endswith((".dist-info", ".egg-info"))
            and (name.endswith((".py", ".pth", ".so", ".pyc")) or not _owned_below(name, owner))
        ):
            # a module, a .pth or a package that Python reaches through the link: named,
            # never read (a linked folder a RECORD lists is installed.py's to name)
            out.append(name)
    return out


def _owned_below(folder: str, owner: Dict[str, int]) -> bool:
    lead = folder + "/"
    return any(path.startswith(lead) for path in owner)


def leads_out(path: str, prefix: str) -> Optional[str]:
    """Where ``path`` leads when it is a symlink out of the venv at ``prefix``; else None."""
    try:
        if not stat.S_ISLNK(os.lstat(path).st_mode):
            return None
    except OSError:
        return None
    target, inside = os.path.realpath(path), os.path.realpath(prefix)
    return None if target == inside or target.startswith(inside + "/") else target


def confined_sites(sites: List[str], prefix: str, warnings: List[str]) -> List[str]:
    """``sites`` without those reached through a link out of the venv at ``prefix`` (a
    ``lib`` folder linked elsewhere): nothing below one is read, and each is named."""
    if sys.prefix == getattr(sys, "base_prefix", sys.prefix):
        return sites  # not a venv: the interpreter's own folders
    real_prefix = os.path.realpath(prefix)
    out = []
    for site in sites:
        leak = _link_out(site, prefix, real_prefix)
        if leak is None:
            out.append(site)
        else:
            warnings.append(
                "%s: %s is a link out of the venv (to %s); nothing below it is read"
                % (site, leak[0], leak[1])
            )
    return out


def _link_out(site: str, prefix: str, real_prefix: str) -> Optional[Tuple[str, str]]:
    """The first folder between ``prefix`` and ``site`` that is a link leading out of the
    venv, with where it leads; None if there is none (``lib64 -> lib`` stays inside)."""
    lead = prefix.rstrip("/") + "/"
    if not site.startswith(lead):
        return None
    path = prefix.rstrip("/")
    for part in site[len(lead) :].split("/"):
        if not part:
            continue
        path = path + "/" + part
        try:
            if not stat.S_ISLNK(os.lstat(path).st_mode):
                continue
        except OSError:
            return None
        target = os.path.realpath(path)
        if target != real_prefix and not target.startswith(real_prefix + "/"):
            return path, target
    return None


def capped(warnings: List[str], lines: List[str], what: str) -> None:
    """``lines`` added to ``warnings``, at most MAX_WARNED of them, then one line counting
    the rest."""
    warnings.extend(lines[:MAX_WARNED])
    if len(lines) > MAX_WARNED:
        warnings.append("and %d more %s" % (len(lines) - MAX_WARNED, what))


def unowned_files(
    site: str, owner: Dict[str, int], claimed: Optional[Set[str]] = None
) -> List[str]:
    """Files that run at the top of ``site`` that no RECORD claims (but `envguard protect`'s
    own hook, as protect writes it), and what unowned_startup() adds (``claimed``: its)."""
    try:
        names = sorted(os.listdir(site))
    except OSError:
        return []
    out: List[str] = []
    for name in names:
        if name in owner or not name.endswith((".py", ".pth", ".so")):
            continue
        if _is_protect_hook(site + "/" + name, name):
            continue
        try:
            if stat.S_ISREG(os.lstat(site + "/" + name).st_mode):
                out.append(name)
        except OSError:
            continue
    return out + unowned_startup(site, names, owner, claimed)


# `envguard protect`'s hook as it writes it (guard/hook.py with its two lines filled in):
# no RECORD claims it, and it is no stray while it is exactly that. A test keeps these
# equal to what protect writes.
PROTECT_PTH = "_envguard_protect.pth"
PROTECT_HOOK = "_envguard_protect.py"
PROTECT_PTH_TEXT = b"import _envguard_protect\n"
PROTECT_HOOK_SHA256 = "8cc5a6ee29ff8df14c7ff315549a11cf39816fff857a3dd52eb09060589a1a69"
# The hooks earlier envguards wrote (a venv protected then is no stray's until protected
# again): before the guard's depth marker; before the hook watched pip's Command; before
# it let a dry run through.
PROTECT_HOOK_EARLIER = (
    "50112ff90f1083120fc6dbc06b31037f5914047d3712ac51c64130241bd68768",
    "2e91cfe02bf533317d3e7d53f52385afc0c8de185d60b8f9b4f39e8efb5f631c",
    "a97a32a2c09dcda6e1ea99df85f3975882c5bf6591b1ec16fa2279ea72781429",
)
# The lines protect fills in (with a literal each), as guard/hook.py holds them.
_HOOK_LINES = (
    (b"VENV = ", b'VENV = ""\n'),
    (b"ENVGUARD = ", b'ENVGUARD = ["python3", "-m", "envguard"]\n'),
)


def _is_protect_hook(path: str, name: str) -> bool:
    """``path`` is protect's .pth line or its hook, as protect writes them: whatever else
    is in them (code in the filled-in lines too) makes them strays."""
    import hashlib

    if name not in (PROTECT_PTH, PROTECT_HOOK):
        return False
    try:
        data = read_bytes(path, 1 << 16)
    except OSError:
        return False
    if name == PROTECT_PTH:
        return data == PROTECT_PTH_TEXT
    lines = data.splitlines(True)
    for lead, template in _HOOK_LINES:
        at = next((n for n, line in enumerate(lines) if line.startswith(lead)), None)
        if at is None or not _literal(lines[at][len(lead) :], lead == b"VENV = "):
            return False
        lines[at] = template
    return hashlib.sha256(b"".join(lines)).hexdigest() in (
        PROTECT_HOOK_SHA256,
        *PROTECT_HOOK_EARLIER,
    )


def _literal(text: bytes, one: bool) -> bool:
    """``text`` is one line holding a string literal (``one``) or a list of them."""
    import ast

    try:
        value = ast.literal_eval(text.decode("utf-8").strip())
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        return False
    if one:
        return isinstance(value, str)
    return isinstance(value, list) and all(isinstance(v, str) for v in value)
