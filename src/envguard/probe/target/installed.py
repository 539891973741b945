"""What is on disk against what each distribution's RECORD says it installed.

Per distribution: files modified in place, missing, added under its folders, or holding
another distribution's bytes (clobbered); per site-packages: paths two distributions' RECORDs
claim with different contents (clashes) and whose copy is on disk; files at the top of
site-packages that no RECORD claims (a stray ``.pth`` runs code at every start-up).

``quick`` (the default) looks at the files that run (``.py``, shared libraries, ``.pth``, a
``.pyc`` RECORD hashes; bytecode, start-up code and console scripts beyond: loaded.py):
one ``lstat`` each, compared with RECORD's size. A file of the right size is hashed when
anything on disk says it may have been written after its wheel was unpacked:
- its mtime is later than RECORD's (written after the install);
- its mtime is later than its ``.dist-info``'s METADATA and WHEEL (a wheel's own metadata
  comes last in its archive, so an installer that unpacks it writes them last). uv links
  installed files to its unpacked cache: an edit in place through one venv edits the cache,
  and a venv built later from it gets the edited file with an older mtime than its own,
  freshly written RECORD, but never older than the unpack;
- it has one link and its ctime is later than RECORD's (an edit whose mtime was put back;
  a file with several links is left out: every new link to it moves its ctime, and uv links
  its cache into every venv; but not in a distribution that has a one-link file, which uv
  did not link: there a second link given to a file before an edit changes nothing). A venv
  copied with its times (a container image's layers, ``tar``, ``cp -a``, ``rsync -a``, a
  ``chown -R``) has every ctime moved, RECORD's too: when RECORD's ctime is later than its
  mtime (an install writes RECORD once), the copy's time (RECORD's ctime) plus COPY_SLACK_NS
  for the files copied after it is what a file's ctime is compared with, not RECORD's mtime
  (else every file of every venv in a container is hashed at each probe, the verdicts kept
  outside the image).
``deep`` hashes every file RECORD lists. Nothing is followed out of site-packages: rows
naming ``..`` or an absolute path are skipped, and nothing below a folder that is a symlink
is read.
"""

# ruff: noqa: UP006, UP035, UP045, B905
# (B905: zip(strict=) is 3.10+; the target runs 3.8)
from __future__ import annotations

import os
import stat
import time
from itertools import repeat
from operator import and_, attrgetter, gt, itemgetter, methodcaller

from .distcache import stamp_mtime
from .loaded import (
    MAX_ENTRIES,
    PYC_CAP,
    QUICK_COMPILE_SECONDS,
    Bytecode,
    BytecodeScan,
    bytecode_folders,
    capped,
    check_scripts,
    script_rows,
    unowned_files,
)
from .reading import RECORD_CAP, read_bytes
from .records import parse_rows
from .sitefolders import added_files, check_folders

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

    from .distcache import DistCache

# Paths kept per list and distribution; the rest are counted.
MAX_LISTED = 50
# Files at the top of site-packages that no RECORD claims, kept.
MAX_UNOWNED = 200
# Clashes kept, and claimants per clash (the model refuses more).
MAX_CLASHES = 1000
MAX_CLAIMANTS = 64
# A file larger than this is not hashed (the largest real wheel file, a CUDA library, is
# under 2 GiB; a sparse file of a terabyte reads as fast as the disk lets zeros through),
# nor, in the quick check, once this many bytes were hashed in one run: said, not hung on.
HASH_FILE_CAP = 4 << 30
QUICK_HASH_BUDGET = 8 << 30
# A RECORD whose ctime is later than its mtime by more than COPY_AFTER_NS was copied (or
# its owner or mode changed) after the install; the files copied with it are given
# COPY_SLACK_NS after it.
COPY_AFTER_NS = 2 * 10**9
COPY_SLACK_NS = 600 * 10**9
_O_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
# What the per-file steps read, as C-level callables: a step over every file of a
# distribution is a map() at C speed, not a Python loop (the check's cost is meant to be its
# system calls: one lstat a file).
_SIZE, _MTIME, _CTIME = attrgetter("st_size"), attrgetter("st_mtime_ns"), attrgetter("st_ctime_ns")
_NLINK, _MODE, _FIRST = attrgetter("st_nlink"), attrgetter("st_mode"), itemgetter(0)
_SPLIT_FOLDER = methodcaller("rpartition", "/")
_ONE = (1).__eq__
_URLSAFE = bytes.maketrans(b"+/", b"-_")  # base64's URL-safe alphabet (RECORD's hashes)


def _digest(path: str, algorithm: str) -> Optional[str]:
    """RECORD's form of a regular file's hash (``sha256=<urlsafe b64, no padding>``); None
    for anything else (a symlink, a FIFO, a device, unreadable). base64's alphabet by
    binascii: base64 imports re, a few ms more in each of the check's shares."""
    import binascii
    import hashlib

    try:
        fd = os.open(path, _O_READ)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.new(algorithm)
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            digest.update(block)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    text = binascii.b2a_base64(digest.digest(), newline=False).rstrip(b"=")
    return algorithm + "=" + text.translate(_URLSAFE).decode()


def _same_bytes(full: str, recorded: str) -> Optional[bool]:
    """Whether the file hashes to RECORD's ``recorded`` hash; None if that cannot be told."""
    algorithm = recorded.partition("=")[0]
    if algorithm not in ("sha256", "sha384", "sha512"):
        return None
    found = _digest(full, algorithm)
    return None if found is None else found == recorded


class _Budget:
    """What may still be hashed in this run: files over HASH_FILE_CAP never, and in the
    quick check no more than QUICK_HASH_BUDGET bytes in all; what was left unhashed is
    counted for one warning."""

    def __init__(self, deep: bool, left: Optional[int] = None) -> None:
        self.left = -1 if deep else QUICK_HASH_BUDGET if left is None else left
        self.skipped = 0

    def take(self, size: int) -> bool:
        if size > HASH_FILE_CAP or 0 <= self.left < size:
            self.skipped += 1
            return False
        if self.left >= 0:
            self.left -= size
        return True


class _Site:
    """The rows of every distribution in one site-packages folder."""

    def __init__(self, site: str) -> None:
        self.site = site
        self.owner: Dict[str, int] = {}  # path -> the (first) distribution claiming it
        # paths claimed twice or more: (path, hash, size, dist index) per claim
        self.claims: Dict[str, List[Tuple[str, str, str, int]]] = {}
        self.installed: Dict[int, int] = {}  # dist index -> RECORD's mtime_ns
        # dist index -> the latest mtime_ns of METADATA and WHEEL: when the wheel was unpacked
        self.unpacked: Dict[int, int] = {}
        # dist index -> what a one-link file's ctime is compared with (see the docstring)
        self.changed: Dict[int, int] = {}
        # dist index -> its rows as (path, hash, size), made when first asked (_rows_of)
        self.rows: Dict[int, List[Tuple[str, str, str]]] = {}
        self.paths: Dict[int, List[str]] = {}  # dist index -> the paths of its rows
        self.sizes: Dict[int, str] = {}  # dist index -> the sizes of its rows, joined by ","
        self.hashes: Dict[int, str] = {}  # dist index -> kept rows' hashes, joined by newlines
        self.dirs: Dict[int, Set[str]] = {}  # dist index -> the folders of its rows
        self.scripts: Dict[int, List[Tuple[str, str, str]]] = {}  # console scripts in bin/
        self.by_path: Dict[int, Dict[str, Tuple[str, str, str]]] = {}  # see _row_of()
        self.folders: Dict[str, Optional[int]] = {}  # folder -> its mtime_ns; None: not safe
        # folder -> its inode, mtime_ns and ctime_ns (sitefolders.folder_stamp: as text)
        self.folder_stamps: Dict[str, Tuple[int, int, int]] = {}
        # folders whose __pycache__ holds a file some RECORD lists (loaded.BytecodeScan)
        self.listed: Set[str] = set()
        self.record_stamps: Dict[int, str] = {}  # dist index -> RECORD's mtime_ns and ctime_ns
        # path -> its lstat, as the check took it (loaded.py stamps the sources with it)
        self.stat_of: Dict[str, os.stat_result] = {}
        self.linked = False  # some folder is a symlink (or no folder)
        self.cache: Optional[DistCache] = None


class Plan:
    """What every share of the check reads (prepare()): each site's RECORD rows, owners,
    folders and clashes, and the units of work: one distribution each, with the folders
    whose bytecode is its to look at."""

    def __init__(self, deep: bool) -> None:
        self.deep = deep
        self.sites: Dict[str, _Site] = {}
        self.lost: Dict[str, Dict[int, Dict[str, str]]] = {}  # site -> dist -> lost paths
        self.units: List[Tuple[str, int]] = []  # (site, dist index)
        self.folders: Dict[int, List[str]] = {}  # dist index -> the bytecode folders it looks at
        self.clashes: List[Dict[str, Any]] = []
        self.clashing: List[str] = []
        # one float shared by all sites and shares: quick, a time; deep, -1 (none)
        self.deadline = [-1.0 if deep else time.monotonic() + QUICK_COMPILE_SECONDS]
        # What the quick check may still hash once the clashes were settled, and among how
        # many shares it is divided (checking.Checking: two children, each half of it).
        self.hash_left = QUICK_HASH_BUDGET
        # site -> the top-level names its egg-info installs give (they have no RECORD)
        self.tops: Dict[str, Set[str]] = {}
        self.shares = 1
        self.skipped = 0  # files of clashes not hashed (over the caps)
        # site -> (dist index -> files added to its folders, files at the site's top no
        # RECORD claims): read_beside()
        self.beside: Optional[Dict[str, Tuple[Dict[int, List[str]], List[str]]]] = None


def check_installed(
    packages: List[Dict[str, Any]],
    mode: str,
    warnings: List[str],
    cache: Optional[DistCache] = None,
) -> Dict[str, Any]:
    """Fill ``on_disk`` of each distribution with a RECORD; the clashes and unowned files.
    ``mode``: "quick" or "deep". ``cache``: the rows of unchanged RECORDs (quick). In one
    share; checking.Checking splits the units between two processes."""
    plan = prepare(packages, mode, warnings, cache)
    return finish(plan, packages, [work(plan, range(len(plan.units)))], warnings)


def prepare(
    packages: List[Dict[str, Any]],
    mode: str,
    warnings: List[str],
    cache: Optional[DistCache] = None,
    overlay: Optional[str] = None,
) -> Plan:
    """Every RECORD read, every folder stat'ed, the clashes settled: what the shares of the
    check need before any of them starts. ``overlay``: the site of guard's would-be venv
    (the incoming wheels unpacked), whose files the install writes into the venv's site:
    a path it claims that a distribution the install keeps claims too is a clash there."""
    deep = mode == "deep"
    plan = Plan(deep)
    for index, dist in enumerate(packages):
        dist["on_disk"] = None
        if dist["metadata_dir"].endswith(".dist-info"):
            site = plan.sites.get(dist["location"])
            if site is None:
                site = plan.sites[dist["location"]] = _Site(dist["location"])
                site.cache = cache
            _read_record(site, index, dist, deep, warnings, None if deep else cache)
        else:  # an egg-info install has no RECORD: the top-level names it gives are its own
            plan.tops.setdefault(dist["location"], set()).update(_egg_tops(dist))
    budget = _Budget(deep)
    for name, site in plan.sites.items():
        check_folders(site, warnings)
        # (two incoming wheels claiming one path are the install's own: check names them)
        plan.lost[name] = (
            {} if name == overlay else _clashes(site, packages, plan.clashes, plan.clashing, budget)
        )
        first: Optional[int] = None
        for index in site.paths:
            plan.units.append((name, index))
            plan.folders[index] = []
            first = index if first is None else first
        if first is None:
            continue
        # a folder is looked at by the first distribution naming a file in it (its sources
        # were stat'ed in the same share), else by the site's first
        holder: Dict[str, int] = {}
        for index in site.paths:
            for folder in site.dirs[index]:
                holder.setdefault(folder, index)
        top = any(map(methodcaller("__contains__", ""), site.dirs.values()))
        for folder in bytecode_folders(site.folders, site.owner, top):
            plan.folders[holder.get(folder, first)].append(folder)
    if overlay is not None and overlay in plan.sites:
        _would_clash(plan, overlay, packages)
    plan.hash_left, plan.skipped = max(budget.left, 0), budget.skipped
    # The largest units first (files, then folders of bytecode): two shares taking units
    # as they come end together when the last ones taken are small.
    sized = {unit: len(plan.sites[unit[0]].paths[unit[1]]) for unit in plan.units}
    plan.units.sort(key=lambda unit: -sized[unit] - 8 * len(plan.folders[unit[1]]))
    return plan


def work(plan: Plan, units: Iterable[int], inside: bool = False) -> Dict[str, Any]:
    """One share of the check: the units numbered ``units`` (taken as they come: another
    share may take the rest), and the bytecode of their folders compared with its
    sources. Plain JSON, for a share done in a forked child. ``inside``: the process may
    change its working folder (a child of its own): it works in each site, and stats the
    files there by their paths relative to it, which spares the kernel the walk of the
    site's own path at every file (a sixth of what an ``lstat`` costs in a venv 7 folders
    deep)."""
    budget = _Budget(plan.deep, plan.hash_left // plan.shares)
    scans: Dict[str, BytecodeScan] = {}
    results = []
    here = None
    for unit in units:
        name, index = plan.units[unit]
        site = plan.sites[name]
        site.stat_of.clear()  # one distribution's at a time: its folders' sources are in it
        scan = scans.get(name)
        if scan is None:
            scan = scans[name] = BytecodeScan(
                site.site, site.owner, site.cache, site.stat_of, site.listed
            )
        if inside and here != name and os.path.isabs(name):  # (a relative site: never)
            here = name
            try:
                os.chdir(name)
            except OSError:
                here = None
        at = scan.at = "" if here == name else name + "/"
        result = _check_dist(site, index, plan.lost[name].get(index, {}), plan.deep, budget, at)

        def same(
            full: str, digest: str, st: os.stat_result, cache: Optional[DistCache] = site.cache
        ) -> Optional[bool]:
            # (its ctime counts however many links it has: an installer writes its scripts)
            return hashed_same(cache, full, digest, st, True, plan.deep, budget.take)

        check_scripts(site.site, site.scripts.get(index, []), result, same)
        results.append([index, result])
        scan.scan(plan.folders[index])
    for name in scans:
        plan.sites[name].stat_of.clear()
    bytecode = []
    unchecked = 0
    for name, scan in scans.items():
        found = Bytecode()
        scan.finish(found, plan.deadline)
        unchecked += found.unchecked
        bytecode.append([name, sorted(found.by_dist.items()), found.top])
    return {
        "on_disk": results,
        "bytecode": bytecode,
        "unchecked": unchecked,
        "skipped": budget.skipped,
    }


def read_beside(plan: Plan) -> None:
    """What finish() reads that no share's answer changes: the files added to the
    distributions' folders, and those at the top of each site that no RECORD claims. Read
    while forked shares still work, in a thread by the check's deadline (checking.Checking:
    the probe has nothing else to do then), else by finish()."""
    if plan.beside is None:
        plan.beside = {
            name: (
                added_files(site),
                unowned_files(site.site, site.owner, site.folders.keys() | plan.tops.get(name, ())),
            )
            for name, site in plan.sites.items()
        }


def finish(
    plan: Plan, packages: List[Dict[str, Any]], shares: List[Dict[str, Any]], warnings: List[str]
) -> Dict[str, Any]:
    """The shares' answers put together, then what needs them all: files added to the
    distributions' folders, the top of site-packages, the warnings."""
    read_beside(plan)
    assert plan.beside is not None  # (read_beside's)
    tops: Dict[str, List[str]] = {}
    unchecked, skipped = 0, plan.skipped
    for share in shares:
        for index, result in share["on_disk"]:
            packages[index]["on_disk"] = result
    for share in shares:  # a pyc may be the drift of a distribution the other share took
        for name, by_dist, top in share["bytecode"]:
            for index, paths in by_dist:
                packages[index]["on_disk"]["added"].extend(paths)
            tops.setdefault(name, []).extend(top)
        unchecked += share["unchecked"]
        skipped += share["skipped"]
    unowned: List[str] = []
    for name, site in plan.sites.items():
        added, top = plan.beside[name]
        for index, paths in added.items():
            result = packages[index].get("on_disk")
            if result is not None:
                result["added"].extend(paths)
        for index in site.paths:
            result = packages[index]["on_disk"]
            result["added"].sort()
            _cap(result)
        unowned.extend(sorted(top + tops.get(name, [])))
    capped(warnings, plan.clashing, "paths claimed twice (%d listed in clashes)" % MAX_CLASHES)
    if unchecked:
        warnings.append(
            "%d bytecode files were not compared with their source (over %d MiB, over %gs "
            "of compiling without --deep, or past %d in one __pycache__)"
            % (unchecked, PYC_CAP >> 20, QUICK_COMPILE_SECONDS, MAX_ENTRIES)
        )
    if skipped:
        warnings.append(
            "%d installed files were not hashed (over %d GiB each, or over %d GiB in all "
            "without --deep); their size was checked"
            % (skipped, HASH_FILE_CAP >> 30, QUICK_HASH_BUDGET >> 30)
        )
    if len(unowned) > MAX_UNOWNED:
        warnings.append(
            "and %d more files at the top of site-packages that no RECORD claims (%d listed)"
            % (len(unowned) - MAX_UNOWNED, MAX_UNOWNED)
        )
    return {"clashes": plan.clashes[:MAX_CLASHES], "unowned": unowned[:MAX_UNOWNED]}


def _read_record(
    site: _Site,
    index: int,
    dist: Dict[str, Any],
    deep: bool,
    warnings: List[str],
    cache: Optional[DistCache],
) -> None:
    folder = os.path.join(site.site, dist["metadata_dir"])
    record_path = os.path.join(folder, "RECORD")
    stamps = site.cache.stamps_of(folder) if site.cache is not None else None
    key = cache.record_key(folder) if cache is not None else None
    # Kept rows are what parse_rows() made here (the cache checks their checksum).
    held = cache.record_rows(key, 4) if cache is not None and key is not None else None
    escaped = unreadable = 0
    text = None
    if held is not None and key is not None:
        paths = held[0].split("\n") if held[0] else []
        installed, record_ctime = map(int, key.rsplit("\0", 1)[1].split(",")[3:5])
        site.sizes[index], site.hashes[index] = held[1], held[2]
        folders = held[3].split("\n") if paths else []
    else:
        try:
            st = os.lstat(record_path)
            installed, record_ctime = st.st_mtime_ns, st.st_ctime_ns
            record = read_bytes(record_path, RECORD_CAP)
        except OSError:
            return  # said by the metadata scan: no RECORD, or unreadable
        text = record.decode("utf-8", "surrogateescape")
        rows, escaped, unreadable = parse_rows(text, deep)
        site.rows[index], paths = rows, list(map(_FIRST, rows))
        site.sizes[index] = ",".join(r[2] for r in rows)
        # each folder once, in the order first named (kept: a split, where this is a
        # partition of every path)
        folders = list(dict.fromkeys(map(_FIRST, map(_SPLIT_FOLDER, paths))))
        if cache is not None and not escaped and not unreadable:
            cache.keep_record_rows(
                key,
                [
                    "\n".join(paths),
                    site.sizes[index],
                    "\n".join(r[1] for r in rows),
                    "\n".join(folders),
                ],
            )
    if escaped:
        warnings.append(
            "%s %s: %d RECORD rows name paths outside site-packages; not checked"
            % (dist["name"], dist["version"], escaped)
        )
    if unreadable:
        warnings.append(
            "%s %s: %d RECORD rows are not one line of text; not checked"
            % (dist["name"], dist["version"], unreadable)
        )
    site.installed[index] = installed
    site.record_stamps[index] = "%d,%d" % (installed, record_ctime)
    site.changed[index] = (
        record_ctime + COPY_SLACK_NS if record_ctime > installed + COPY_AFTER_NS else installed
    )
    site.unpacked[index] = _unpacked(folder, installed, stamps)
    site.paths[index] = paths
    if "__pycache__/" in (held[0] if held is not None else "\n".join(paths)):
        site.listed.update(_listed_bytecode(paths))
    site.scripts[index] = script_rows(record_path, key, cache, text)
    owner = site.owner
    site.dirs[index] = set(folders)
    if owner.keys().isdisjoint(paths):  # the common case, told at C speed
        owner.update(dict.fromkeys(paths, index))
        return
    for path in owner.keys() & set(paths):  # claimed before: the few
        first = owner[path]
        if path not in site.claims:
            site.claims[path] = [(*_row_of(site, first)[path], first)]
        site.claims[path].append((*_row_of(site, index)[path], index))
    owner.update(dict.fromkeys(paths, index))
    for path in site.claims.keys() & set(paths):  # the first claimant stays the owner key
        owner[path] = site.claims[path][0][3]


def _listed_bytecode(paths: List[str]) -> Set[str]:
    """The folders whose ``__pycache__`` holds a file among ``paths`` (a RECORD's)."""
    found = set()
    for path in paths:
        cache_dir = path.rpartition("/")[0]
        if cache_dir == "__pycache__":
            found.add("")
        elif cache_dir.endswith("/__pycache__"):
            found.add(cache_dir[: -len("/__pycache__")])
    return found


def _unpacked(metadata_dir: str, installed: int, stamps: Optional[Dict[str, str]]) -> int:
    """When the wheel's files were unpacked: the latest mtime of its METADATA and WHEEL, never
    later than RECORD's (``installed``). ``stamps``: the .dist-info's as the distribution
    scan took them (DistCache.stamps_of), else None; a name missing there (the folder could
    not be listed, say) is stamped here."""
    latest = -1
    for name in ("METADATA", "WHEEL"):
        if stamps is not None and name in stamps:
            latest = max(latest, stamp_mtime(stamps[name]))
            continue
        try:
            latest = max(latest, os.lstat(os.path.join(metadata_dir, name)).st_mtime_ns)
        except OSError:
            pass
    return installed if latest < 0 else min(latest, installed)


def _row_of(site: _Site, index: int) -> Dict[str, Tuple[str, str, str]]:
    """A distribution's rows by path (its first row of each), made once: a path claimed
    twice must not cost a scan of both RECORDs (two .dist-info folders of one package, as
    a broken upgrade leaves them, share every path)."""
    found = site.by_path.get(index)
    if found is None:
        found = site.by_path[index] = {r[0]: r for r in reversed(_rows_of(site, index))}
    return found


def _rows_of(site: _Site, index: int) -> List[Tuple[str, str, str]]:
    """A distribution's rows as (path, hash, size), made from the kept columns when first
    asked: the common check needs only the paths and the sizes (_as_installed)."""
    rows = site.rows.get(index)
    if rows is None:
        rows = site.rows[index] = list(
            zip(site.paths[index], site.hashes[index].split("\n"), site.sizes[index].split(","))
        )
    return rows


def _readable(site: _Site, path: str) -> bool:
    folder = path.rpartition("/")[0]
    return not folder or site.folders.get(folder, 0) is not None


def _linked_folder(site: _Site, path: str) -> Optional[str]:
    """The outermost folder above ``path`` that is a symlink (or no folder), if any."""
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        folder = "/".join(parts[:i])
        if folder in site.folders and site.folders[folder] is None:
            return folder
    return None


def _clashes(
    site: _Site,
    packages: List[Dict[str, Any]],
    out: List[Dict[str, Any]],
    warnings: List[str],
    budget: _Budget,
) -> Dict[int, Dict[str, str]]:
    """Paths claimed by two or more distributions with different contents, each with the
    one whose bytes are on disk. Returns, per distribution that lost a path, path -> the
    winner's name."""
    lost: Dict[int, Dict[str, str]] = {}
    for path, claims in sorted(site.claims.items()):
        if len({digest for _, digest, _, _ in claims}) < 2:
            continue  # all claim the same bytes (nvidia/__init__.py)
        owner = None
        if _readable(site, path):
            full = site.site + "/" + path
            try:
                size = str(os.lstat(full).st_size)
            except OSError:
                size = ""
            fits = [c for c in claims if c[2] == size]
            if len({c[1] for c in fits}) == 1:
                owner = fits[0][3]
            elif fits and budget.take(int(size)):
                found = _digest(full, fits[0][1].partition("=")[0])
                owner = next((c[3] for c in fits if c[1] == found), None)
        names = []
        for _, _, _, index in claims:
            names.append({"name": packages[index]["name"], "version": packages[index]["version"]})
            if owner is not None and index != owner:
                lost.setdefault(index, {})[path] = packages[owner]["name"]
        owner_name = packages[owner]["name"] if owner is not None else None
        out.append({"path": path, "claimants": names[:MAX_CLAIMANTS], "owner": owner_name})
        listed = " and ".join("%s %s" % (n["name"], n["version"]) for n in names)
        warnings.append(
            "%s is claimed by %s; the file on disk is %s"
            % (path, listed, owner_name + "'s" if owner_name else "none of theirs")
        )
    return lost


def _egg_tops(dist: Dict[str, Any]) -> Set[str]:
    """The top-level names an egg-info install gives: its top_level.txt, and its name."""
    tops = {str(dist["name"]).replace("-", "_")}
    try:
        path = os.path.join(dist["location"], dist["metadata_dir"], "top_level.txt")
        text = read_bytes(path, 1 << 16).decode("utf-8", "replace")
    except (OSError, ValueError):
        return tops
    return tops | {line.strip() for line in text.splitlines() if line.strip()}


def _would_clash(plan: Plan, overlay: str, packages: List[Dict[str, Any]]) -> None:
    """The clashes the install would make (see prepare): each path an incoming wheel
    writes that a distribution left installed claims with other bytes, the incoming one
    then on disk (the install writes last). A distribution the install replaces is
    shadowed by its incoming version, and claims nothing."""
    incoming = plan.sites[overlay]
    # a clash the venv has now is said as the install would leave it (one record a path)
    known = {clash["path"]: n for n, clash in enumerate(plan.clashes)}
    for name, site in plan.sites.items():
        if name == overlay or incoming.owner.keys().isdisjoint(site.owner):
            continue
        for path in sorted(incoming.owner.keys() & site.owner.keys()):
            kept = [c[3] for c in site.claims.get(path, ())] or [site.owner[path]]
            kept = [i for i in kept if not packages[i]["shadowed"]]
            if not kept:
                continue
            new = incoming.owner[path]
            ours = _row_of(incoming, new)[path]
            theirs = [i for i in kept if _row_of(site, i)[path][1] != ours[1]]
            if not theirs or len(plan.clashes) >= MAX_CLASHES:
                continue
            claimants = [packages[i] for i in theirs] + [packages[new]]
            clash = {
                "path": path,
                "claimants": [
                    {"name": d["name"], "version": d["version"]} for d in claimants[:MAX_CLAIMANTS]
                ],
                "owner": packages[new]["name"],
            }
            if path in known:
                plan.clashes[known[path]] = clash
            else:
                plan.clashes.append(clash)


def _check_dist(
    site: _Site,
    index: int,
    lost: Dict[str, str],
    deep: bool,
    budget: _Budget,
    at: str,
) -> Dict[str, Any]:
    """``at``: what the paths to stat start with (the site and a "/", or "" in it)."""
    unpacked = site.unpacked[index]
    changed = site.changed[index]
    modified: List[str] = []
    missing: List[str] = []
    base = site.site + "/"
    paths = site.paths[index]
    rows: Optional[List[Tuple[str, str, str]]] = None  # made when a file is looked at again
    if lost or site.linked:
        wanted = []
        for row in _rows_of(site, index):
            if row[0] in lost:
                continue
            if _readable(site, row[0]):
                wanted.append(row)
                continue
            linked = _linked_folder(site, row[0])
            if linked is not None and linked not in modified:
                modified.append(linked)  # its code runs from wherever the link leads
        rows = wanted
        paths = list(map(_FIRST, rows))
    stats: List[Optional[os.stat_result]]
    try:  # the common case, at C speed: every file there
        stats = list(map(os.lstat, map(at.__add__, paths) if at else paths))
    except OSError:
        stats = []
        for path in paths:
            try:
                stats.append(os.lstat(at + path))
            except OSError as exc:
                stats.append(None)
                if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
                    missing.append(path)
    if None not in stats:
        site.stat_of.update(zip(paths, stats))  # type: ignore[arg-type]
    # A distribution uv did not link from its cache (a file of one link): every file's ctime
    # counts, a second link given to one included (rule 3 of the docstring).
    copied = 1 in map(_NLINK, filter(None, stats))
    sizes = site.sizes[index] if rows is None else ",".join(map(itemgetter(2), rows))
    if not deep and _as_installed(stats, sizes, unpacked, changed, copied):
        stats = []  # the common case: no file to look at again
    elif rows is None:
        rows = _rows_of(site, index)
    suspects = [
        (row, st)
        for row, st in zip(rows or (), stats)
        if st is not None
        and (
            deep
            or st.st_mtime_ns > unpacked
            or ((copied or st.st_nlink == 1) and st.st_ctime_ns > changed)
            or str(st.st_size) != row[2]
            or st.st_mode >> 12 != 8
        )
    ]
    for (path, digest, size), st in suspects:
        if (
            not stat.S_ISREG(st.st_mode)
            or str(st.st_size) != size
            or hashed_same(site.cache, base + path, digest, st, copied, deep, budget.take) is False
        ):
            modified.append(path)
    return {
        "checked": len(paths),
        "modified": sorted(modified),
        "missing": sorted(missing),
        "added": [],
        "clobbered": sorted(lost),
    }


def hashed_same(
    cache: Optional[DistCache],
    full: str,
    digest: str,
    st: os.stat_result,
    copied: bool,
    deep: bool,
    take: Callable[[int], bool],
) -> Optional[bool]:
    """Whether the regular file ``full`` (its lstat ``st``) hashes to RECORD's ``digest``:
    True from the verdict kept for that stamp (quick), else hashed when ``take`` allows
    its size (None: not hashed, or it cannot be told), and a True verdict kept. A file with
    several links is kept without its ctime (unless its distribution was ``copied``: see
    the docstring's rule 3): every venv built from (or removed from) uv's cache moves the
    ctime of every file it links, and a verdict tied to it would have the same files
    hashed again."""
    key = "%s\0%s\0%d,%d,%d,%d" % (
        full,
        digest,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns if copied or st.st_nlink == 1 else -1,
    )
    if cache is not None and not deep and cache.was_verified(key):
        return True
    if not take(st.st_size):
        return None
    same = _same_bytes(full, digest)
    if same and cache is not None:
        cache.keep_verified(key, st.st_ctime_ns)
    return same


def _as_installed(
    stats: List[Optional[os.stat_result]],
    sizes: str,
    unpacked: int,
    changed: int,
    copied: bool,
) -> bool:
    """Whether every file is there, a regular file of RECORD's size (``sizes``: the rows',
    joined by ","), none written after the unpack, and no one-link file (any file,
    ``copied``) changed after RECORD (_check_dist's rule for each file, for all at once at
    C speed). False: each file is looked at."""
    if not stats or None in stats or max(map(_MTIME, stats)) > unpacked:
        return not stats
    if ",".join(map(str, map(_SIZE, stats))) != sizes:
        return False
    if not all(map(stat.S_ISREG, map(_MODE, stats))):
        return False
    if max(map(_CTIME, stats)) <= changed:
        return True
    if copied:
        return False
    return not any(
        map(and_, map(gt, map(_CTIME, stats), repeat(changed)), map(_ONE, map(_NLINK, stats)))
    )


def _cap(result: Dict[str, Any]) -> None:
    more = 0
    for key in ("modified", "missing", "added", "clobbered"):
        more += max(0, len(result[key]) - MAX_LISTED)
        del result[key][MAX_LISTED:]
    result["more"] = more
