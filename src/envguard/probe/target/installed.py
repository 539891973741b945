"""What is on disk against what each distribution's RECORD says it installed.

Per distribution: files modified in place, missing, added under its folders, or holding
another distribution's bytes (clobbered); per site-packages: paths two distributions' RECORDs
claim with different contents (clashes) and whose copy is on disk; files at the top of
site-packages that no RECORD claims (a stray ``.pth`` runs code at every start-up).

``quick`` (the default) looks at the files that run (``.py``, shared libraries, ``.pth``):
one ``lstat`` each, compared with RECORD's size; a file of the right size written after the
distribution was installed (its mtime later than RECORD's) is hashed. ``deep`` hashes every
file RECORD lists. Nothing is followed out of site-packages: rows naming ``..`` or an
absolute path are skipped, and nothing below a folder that is a symlink is read.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import posixpath
import re
import stat

from .reading import RECORD_CAP, read_bytes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

# Paths kept per list and distribution; the rest are counted.
MAX_LISTED = 50
# Files at the top of site-packages that no RECORD claims, kept.
MAX_UNOWNED = 200
# Suffixes of the files that run: what the quick check stats.
_RUNS = (".py", ".so", ".pth", ".pyd", ".dylib")
_SO_VERSIONED = re.compile(r"\.so(\.[0-9]+)+$")
# An unquoted RECORD row: path,hash,size (a quoted path goes through the csv module).
_ROW = re.compile(r'^([^",\r\n][^,\r\n]*),([^,\r\n]*),([0-9]*)\r?$', re.M)
# What an installer writes into the .dist-info itself, and bytecode: never compared.
_SKIP = re.compile(r"(^|/)__pycache__/|\.py[co]$|\.dist-info/(RECORD|INSTALLER|REQUESTED)$")
_O_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)


def runs(path: str) -> bool:
    """A file the interpreter or the loader executes: what the quick check looks at."""
    return path.endswith(_RUNS) or bool(_SO_VERSIONED.search(path))


def _rows(record: bytes) -> List[Tuple[str, str, str]]:
    text = record.decode("utf-8", "surrogateescape")
    rows = _ROW.findall(text)
    if '"' in text:  # quoted paths (a comma in a file name): the csv module, those lines only
        import csv

        quoted = [line for line in text.splitlines() if line.startswith('"')]
        for row in csv.reader(quoted):
            if len(row) == 3 and row[2].isdigit():
                rows.append((row[0], row[1], row[2]))
    return rows


def _inside(path: str) -> Optional[str]:
    """``path`` normalised if it stays inside site-packages, else None."""
    if "\\" in path or "./" in path or "//" in path or path.startswith("/"):
        path = posixpath.normpath(path.replace("\\", "/"))
        if path.startswith(("../", "/")) or path in ("..", "."):
            return None
    return path


def _digest(path: str, algorithm: str) -> Optional[str]:
    """RECORD's form of a regular file's hash (``sha256=<urlsafe b64, no padding>``); None
    for anything else (a symlink, a FIFO, a device, unreadable)."""
    import base64
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
    return algorithm + "=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def _same_bytes(full: str, recorded: str) -> Optional[bool]:
    """Whether the file hashes to RECORD's ``recorded`` hash; None if that cannot be told."""
    algorithm = recorded.partition("=")[0]
    if algorithm not in ("sha256", "sha384", "sha512"):
        return None
    found = _digest(full, algorithm)
    return None if found is None else found == recorded


class _Site:
    """The RECORD rows of every distribution in one site-packages folder."""

    def __init__(self, site: str) -> None:
        self.site = site
        self.claims: Dict[str, List[Tuple[int, str, int]]] = {}
        self.installed: Dict[int, int] = {}  # dist index -> RECORD's mtime_ns
        self.folders: Dict[str, bool] = {}  # relative folder -> safe to read below


def check_installed(
    packages: List[Dict[str, Any]], mode: str, warnings: List[str]
) -> Dict[str, Any]:
    """Fill ``on_disk`` of each distribution with a RECORD; the clashes and unowned files.
    ``mode``: "quick" or "deep"."""
    deep = mode == "deep"
    sites: Dict[str, _Site] = {}
    own: Dict[int, List[Tuple[str, str, int]]] = {}
    for index, dist in enumerate(packages):
        dist["on_disk"] = None
        if not dist["metadata_dir"].endswith(".dist-info"):
            continue
        site = sites.get(dist["location"])
        if site is None:
            site = sites[dist["location"]] = _Site(dist["location"])
        record_path = os.path.join(dist["location"], dist["metadata_dir"], "RECORD")
        try:
            site.installed[index] = os.lstat(record_path).st_mtime_ns
            record = read_bytes(record_path, RECORD_CAP)
        except OSError:
            continue  # said by the metadata scan: no RECORD, or unreadable
        rows: List[Tuple[str, str, int]] = []
        escaped = 0
        for path, digest, size in _rows(record):
            inside = _inside(path)
            if inside is None:
                if not path.startswith("../"):  # ../../../bin/x: a console script
                    escaped += 1
                continue
            if not size or not digest or _SKIP.search(inside):
                continue
            rows.append((inside, digest, int(size)))
            site.claims.setdefault(inside, []).append((index, digest, int(size)))
        if escaped:
            warnings.append(
                "%s %s: %d RECORD rows name paths outside site-packages; not checked"
                % (dist["name"], dist["version"], escaped)
            )
        own[index] = rows
    clashes: List[Dict[str, Any]] = []
    unowned: List[str] = []
    for site in sites.values():
        _check_folders(site, warnings)
        clobbered = _clashes(site, packages, clashes, warnings)
        for index in own:
            if packages[index]["location"] == site.site:
                packages[index]["on_disk"] = _check_dist(
                    site, index, own[index], clobbered.get(index, {}), deep
                )
        _added(site, packages, own)
        unowned.extend(_unowned(site))
    return {"clashes": clashes, "unowned": unowned[:MAX_UNOWNED]}


def _check_folders(site: _Site, warnings: List[str]) -> None:
    """Each folder RECORD names, and whether it is a real folder (a symlinked one is not
    read below: it may lead out of site-packages)."""
    for path in site.claims:
        folder = path.rpartition("/")[0]
        while folder and folder not in site.folders:
            site.folders[folder] = True
            folder = folder.rpartition("/")[0]
    for folder in sorted(site.folders):  # parents first
        parent = folder.rpartition("/")[0]
        if parent and not site.folders[parent]:
            site.folders[folder] = False
            continue
        try:
            st = os.lstat(site.site + "/" + folder)
        except OSError:
            continue  # missing: its files are missing
        if not stat.S_ISDIR(st.st_mode):
            site.folders[folder] = False
            warnings.append(
                "%s: %s is a symlink or not a folder; the files RECORD lists below it are "
                "not checked" % (site.site, folder)
            )


def _readable(site: _Site, path: str) -> bool:
    folder = path.rpartition("/")[0]
    return not folder or site.folders.get(folder, False)


def _linked_folder(site: _Site, path: str) -> Optional[str]:
    """The outermost folder above ``path`` that is a symlink (or no folder), if any."""
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        folder = "/".join(parts[:i])
        if not site.folders.get(folder, True):
            return folder
    return None


def _clashes(
    site: _Site, packages: List[Dict[str, Any]], out: List[Dict[str, Any]], warnings: List[str]
) -> Dict[int, Dict[str, str]]:
    """Paths claimed by two or more distributions with different contents, each with the
    one whose bytes are on disk. Returns, per distribution that lost a path, path -> the
    winner's name."""
    lost: Dict[int, Dict[str, str]] = {}
    for path, claims in site.claims.items():
        if len(claims) < 2 or len({digest for _, digest, _ in claims}) < 2:
            continue  # one claimant, or all claim the same bytes (nvidia/__init__.py)
        owner = None
        if _readable(site, path):
            full = site.site + "/" + path
            try:
                size = os.lstat(full).st_size
            except OSError:
                size = -1
            fits = [c for c in claims if c[2] == size]
            if len({c[1] for c in fits}) == 1:
                owner = fits[0][0]
            elif fits:
                algorithm = fits[0][1].partition("=")[0]
                found = _digest(full, algorithm) if algorithm in ("sha256", "sha512") else None
                owner = next((c[0] for c in fits if c[1] == found), None)
        names = []
        for index, _, _ in claims:
            names.append({"name": packages[index]["name"], "version": packages[index]["version"]})
            if owner is not None and index != owner:
                lost.setdefault(index, {})[path] = packages[owner]["name"]
        owner_name = packages[owner]["name"] if owner is not None else None
        out.append({"path": path, "claimants": names, "owner": owner_name})
        listed = " and ".join("%s %s" % (n["name"], n["version"]) for n in names)
        warnings.append(
            "%s is claimed by %s; the file on disk is %s"
            % (path, listed, owner_name + "'s" if owner_name else "none of theirs")
        )
    return lost


def _check_dist(
    site: _Site, index: int, rows: List[Tuple[str, str, int]], lost: Dict[str, str], deep: bool
) -> Dict[str, Any]:
    installed = site.installed[index]
    modified: List[str] = []
    missing: List[str] = []
    checked = 0
    base = site.site + "/"
    for path, digest, size in rows:
        if path in lost or not (deep or runs(path)):
            continue
        if not _readable(site, path):
            linked = _linked_folder(site, path)
            if linked is not None and linked not in modified:
                modified.append(linked)  # its code runs from wherever the link leads
            continue
        checked += 1
        try:
            st = os.lstat(base + path)
        except FileNotFoundError:
            missing.append(path)
            continue
        except OSError:
            continue
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_size != size
            or ((deep or st.st_mtime_ns > installed) and _same_bytes(base + path, digest) is False)
        ):
            modified.append(path)
    return {
        "checked": checked,
        "modified": sorted(modified),
        "missing": sorted(missing),
        "added": [],
        "clobbered": sorted(lost),
    }


def _added(site: _Site, packages: List[Dict[str, Any]], own: Dict[int, Any]) -> None:
    """Files that run, in a distribution's folders, that no RECORD claims. Only folders
    changed since the last install into them are listed (adding a file changes a folder's
    mtime)."""
    newest: Dict[str, int] = {}
    owner: Dict[str, int] = {}
    for path, claims in site.claims.items():
        folder = path.rpartition("/")[0]
        if not folder:
            continue  # the top of site-packages: see _unowned
        for index, _, _ in claims:
            when = site.installed[index]
            if when > newest.get(folder, -1):
                newest[folder] = when
            owner.setdefault(folder, index)
    for folder, when in newest.items():
        if not site.folders.get(folder, False):
            continue
        full = site.site + "/" + folder
        try:
            if os.lstat(full).st_mtime_ns <= when:
                continue
            names = os.listdir(full)
        except OSError:
            continue
        for name in names:
            path = folder + "/" + name
            if path in site.claims or not runs(name) or _SKIP.search(path):
                continue
            try:
                if not stat.S_ISREG(os.lstat(full + "/" + name).st_mode):
                    continue
            except OSError:
                continue
            result = packages[owner[folder]].get("on_disk")
            if result is not None:
                result["added"].append(path)
    for index in own:
        result = packages[index].get("on_disk")
        if result is not None and packages[index]["location"] == site.site:
            result["added"].sort()
            _cap(result)


def _cap(result: Dict[str, Any]) -> None:
    more = 0
    for key in ("modified", "missing", "added", "clobbered"):
        more += max(0, len(result[key]) - MAX_LISTED)
        del result[key][MAX_LISTED:]
    result["more"] = more


def _unowned(site: _Site) -> List[str]:
    """Files that run at the top of site-packages that no RECORD claims."""
    try:
        names = sorted(os.listdir(site.site))
    except OSError:
        return []
    out: List[str] = []
    for name in names:
        if name in site.claims or not name.endswith((".py", ".pth", ".so")):
            continue
        try:
            if stat.S_ISREG(os.lstat(site.site + "/" + name).st_mode):
                out.append(name)
        except OSError:
            continue
    return out
