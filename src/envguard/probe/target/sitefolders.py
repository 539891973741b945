"""The folders a site's RECORD rows name (installed.py): each one's mtime and stamp, and
whether it is a real folder. Nothing below a symlinked one is read (it may lead out of
site-packages); the common case, every folder there and real, is told at C speed. Then
what was added to them since their install (added_files)."""

# ruff: noqa: UP006, UP035, UP045, B905
# (B905: zip(strict=) is 3.10+; the target runs 3.8)
from __future__ import annotations

import os
import stat
from operator import attrgetter

from .loaded import capped, in_cache_dir
from .records import package_folder, runs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Dict, List, Optional, Protocol, Set, Tuple

    from .distcache import DistCache

    class Site(Protocol):
        """What the pass reads and fills of installed._Site."""

        site: str
        dirs: Dict[int, Set[str]]
        folders: Dict[str, Optional[int]]
        folder_stamps: Dict[str, Tuple[int, int, int]]
        linked: bool
        paths: Dict[int, List[str]]
        installed: Dict[int, int]
        record_stamps: Dict[int, str]
        owner: Dict[str, int]
        cache: Optional[DistCache]


_MODE, _MTIME = attrgetter("st_mode"), attrgetter("st_mtime_ns")
_STAMP = attrgetter("st_ino", "st_mtime_ns", "st_ctime_ns")


def check_folders(site: Site, warnings: List[str]) -> None:
    """Each folder the rows name, its mtime, and whether it is a real folder (below a
    symlinked one nothing is read: it may lead out of site-packages)."""
    folders: Set[str] = set().union(*site.dirs.values())
    folders.discard("")
    for folder in list(folders):
        parent = folder.rpartition("/")[0]
        while parent and parent not in folders:
            folders.add(parent)
            parent = parent.rpartition("/")[0]
    found = site.folders
    base = site.site + "/"
    if real_folders(site, folders, base):
        return
    linked: List[str] = []
    for folder in sorted(folders):  # parents first
        parent = folder.rpartition("/")[0]
        if parent and parent in found and found[parent] is None:
            found[folder] = None
            site.linked = True
            continue
        try:
            st = os.lstat(base + folder)
        except OSError:
            continue  # missing: its files are missing
        if stat.S_ISDIR(st.st_mode):
            found[folder] = st.st_mtime_ns
            site.folder_stamps[folder] = _STAMP(st)
        else:
            found[folder] = None
            site.linked = True
            linked.append(
                "%s: %s is a symlink or not a folder; the files RECORD lists below it are "
                "not checked" % (site.site, folder)
            )
    capped(warnings, linked, "folders that are symlinks or not folders")


def real_folders(site: Site, folders: Set[str], base: str) -> bool:
    """The common case of check_folders at C speed: every folder there and a real one,
    stat'ed a depth at a time (the folders below one are stat'ed only once every folder
    above them was found a real one: nothing below a symlink is read). False, with
    nothing kept, as soon as one is missing, a symlink or not a folder: each is then looked
    at in turn."""
    depths: Dict[int, List[str]] = {}
    for folder in folders:
        depths.setdefault(folder.count("/"), []).append(folder)
    stats: List[os.stat_result] = []
    names: List[str] = []
    try:
        # relative to the site's folder: the kernel walks its path once, not per folder
        fd = os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return False
    try:
        if os.stat in os.supports_dir_fd:
            lstat: Callable[[str], os.stat_result] = lambda path: os.stat(  # noqa: E731
                path, dir_fd=fd, follow_symlinks=False
            )
        else:
            lstat = lambda path: os.lstat(base + path)  # noqa: E731
        for depth in sorted(depths):
            level = depths[depth]
            found = list(map(lstat, level))
            if not all(map(stat.S_ISDIR, map(_MODE, found))):
                return False
            stats += found
            names += level
    except OSError:
        return False
    finally:
        os.close(fd)
    site.folders.update(zip(names, map(_MTIME, stats)))
    site.folder_stamps.update(zip(names, map(_STAMP, stats)))
    return True


def folder_stamp(stamp: Tuple[int, int, int]) -> str:
    """A folder's stamp (its inode, mtime_ns and ctime_ns, as check_folders keeps them) as
    the distribution cache keys it: made only for the few folders that are looked at
    again (added_files), not for every folder at every probe."""
    return "%d,%d,%d" % stamp


def added_files(site: Site) -> Dict[int, List[str]]:
    """Files that run, in a distribution's folders, that no RECORD claims, by the
    distribution first naming the folder. Only folders changed since the last install into
    them are listed (adding a file changes a folder's mtime).

    A folder listed with nothing added is not listed again while its stamp and the stamps
    of the RECORDs with rows in it stay as they were (the cache's verdicts): Python writes
    ``__pycache__`` into every folder it imports from, after the install, and a venv in use
    would otherwise have every folder listed at every probe."""
    newest: Dict[str, int] = {}
    owners: Dict[str, List[int]] = {}
    for index in site.paths:
        when = site.installed[index]
        for folder in site.dirs[index]:
            if when > newest.get(folder, -1):
                newest[folder] = when
            owners.setdefault(folder, []).append(index)
    newest.pop("", None)  # the top of site-packages: see _unowned
    # The folders above them that hold no file of any RECORD (a namespace package's: nvidia/,
    # cuda/): an __init__.py written there runs at every import below it. Each gets the
    # newest install below it, and those distributions.
    above = site.folders.keys() - newest.keys()
    above.discard("")
    if above:
        for folder, when in list(newest.items()):
            parent = folder.rpartition("/")[0]
            while parent in above:
                if when > newest.get(parent, -1):
                    newest[parent] = when
                first, named = owners[folder][0], owners.setdefault(parent, [])
                if first not in named:
                    named.append(first)
                parent = parent.rpartition("/")[0]
    cache = site.cache
    found_by: Dict[int, List[str]] = {}
    for folder, when in newest.items():
        mtime = site.folders.get(folder)
        if mtime is None or mtime <= when or in_cache_dir(folder):
            continue  # (bytecode in __pycache__: loaded.check_bytecode)
        full = site.site + "/" + folder
        key = "added\0%s\0%s\0%s" % (
            full,
            folder_stamp(site.folder_stamps[folder]),
            ";".join(site.record_stamps[i] for i in owners[folder]),
        )
        if cache is not None and cache.was_verified(key):
            continue
        try:
            names = os.listdir(full)
        except OSError:
            continue
        found = False
        for name in names:
            path = folder + "/" + name
            if path in site.owner:
                continue
            if not runs(name):
                # a package folder no RECORD names (torch/nn/functional/ beside
                # functional.py: import takes the folder), or a link to one (import
                # follows it: named, not read below)
                if path not in site.folders and package_folder(full + "/" + name, name):
                    try:
                        mode = os.lstat(full + "/" + name).st_mode
                        if stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
                            found = True
                            found_by.setdefault(owners[folder][0], []).append(path + "/")
                    except OSError:
                        pass
                continue
            try:
                if not stat.S_ISREG(os.lstat(full + "/" + name).st_mode):
                    continue
            except OSError:
                continue
            found = True
            found_by.setdefault(owners[folder][0], []).append(path)
        if cache is not None and not found:
            cache.keep_verified(key, site.folder_stamps[folder][2])
    return found_by
