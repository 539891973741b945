"""Installed distributions: .dist-info/.egg-info metadata, PEP 610 sources, RECORD hashes."""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import posixpath
import sys
import sysconfig

from .distcache import DistCache, file_stamp
from .loaded import leads_out
from .reading import (
    METADATA_CAP,
    RECORD_CAP,
    SMALL_CAP,
    UNSAFE_CHARS,
    Regex,
    escaped_name,
    not_json_constant,
    open_regular,
    read_bytes,
    read_text,
    report_line,
)
from .redact import redact_url

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

# Files an installer writes itself: they differ between two installs of one wheel.
_INSTALLER_FILES = frozenset(
    ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json")
)


_UNSAFE = Regex("[" + UNSAFE_CHARS + "]")


def canonical_name(name: str) -> str:
    """PEP 503 normalisation (repeated here: the probe may not import packaging): each run
    of "-", "_" and "." one "-", lowercased. In string operations: every probe checks each
    kept record's name with it (plausible()), before its first step, where re is not
    loaded (reading.Regex)."""
    name = name.replace("_", "-").replace(".", "-")
    while "--" in name:
        name = name.replace("--", "-")
    return name.lower()


# The header fields the snapshot needs, one per line (a folded continuation line starts
# with whitespace, so it never matches), matched at C speed.
# Compiled when METADATA is read (an unchanged venv reads none: distcache.py).
_HEADER = r"(?m)^(Name|Version|Requires-Dist):[ \t]*(.*?)[ \t\r]*$"


def metadata_headers(path: str, requires: Optional[List[str]] = None) -> Dict[str, str]:
    """Name and Version from a METADATA/PKG-INFO header block, and each Requires-Dist into
    ``requires`` (as written, markers included).

    Only the header block is read (it ends at the first empty line; the description after
    it is most of a METADATA's bytes). A line of only spaces inside a folded License field
    is a continuation, not the end: real METADATA (sglang's, jupyterlab's) has them."""
    found: Dict[str, str] = {}
    fd = open_regular(path)
    try:
        head = b""
        end = None
        while len(head) < METADATA_CAP:
            block = os.read(fd, 16384 if len(head) < 65536 else 1 << 20)
            if not block:
                break
            # the terminator may straddle two reads: search from just before this block
            start = max(0, len(head) - 4)
            head += block
            ends = [i for i in (head.find(b"\n\n", start), head.find(b"\n\r\n", start)) if i >= 0]
            if ends:
                end = min(ends)
                break
    finally:
        os.close(fd)
    text = (head[:end] if end is not None else head[:METADATA_CAP]).decode("utf-8", "replace")
    # One cheap test of the whole block (line breaks aside) tells whether any value needs
    # the per-value check for unsafe characters (a tab or a non-ASCII space also sends it
    # there: slower, never wrong).
    check = not text.replace("\r\n", "\n").replace("\n", "").isprintable()  # a lone \r: checked
    for key, value in headers(text):
        if key == "Requires-Dist":
            safe = not (check and _UNSAFE.search(value))
            if requires is not None and len(value) <= 512 and safe:
                requires.append(value)
        else:
            found.setdefault(key, value)
    return found


def headers(text: str) -> List[Tuple[str, str]]:
    """What ``re.findall(_HEADER, text)`` finds, by string operations (re's import is 8 ms
    of the CPU of a probe that reads a METADATA: the first after an install): _HEADER
    matches whole lines (only "\\n" ends one for it), from the key and its ":" to the
    value less its blanks."""
    found = []
    for line in text.split("\n"):
        key = line.partition(":")[0]
        if key in _HEADER_KEYS and line[len(key) : len(key) + 1] == ":":
            found.append((key, line[len(key) + 1 :].lstrip(" \t").rstrip(" \t\r")))
    return found


_HEADER_KEYS = ("Name", "Version", "Requires-Dist")


# A distribution with more requirements than this is not one: the rest are left out.
MAX_REQUIRES = 2000


def _record_row(line: str) -> Tuple[str, str]:
    """(path, hash) of one RECORD line; the csv module only for a quoted path."""
    if line[0] == '"':
        import csv

        try:
            row = next(csv.reader([line]), ["", ""])
        except csv.Error:  # a field over csv's limit; a NUL (before Python 3.11)
            return "", ""
        return (row[0], row[1]) if len(row) > 1 else ("", "")
    head, _, _size = line.rpartition(",")
    path, _, digest = head.rpartition(",")
    return path, digest


def record_fingerprint(record: bytes | str, dist_info: str) -> str:
    """sha256 over sorted (path, hash) RECORD rows that two installs of one wheel share.

    Left out: bytecode, files outside the package tree (console scripts carry the venv
    path in their shebang) and the files the installer writes itself. This loop is most
    of the probe's time (torch's RECORD has ~15k rows), so the common case stays cheap.
    """
    # One decode of the whole file is far cheaper than a decoding reader.
    record_text = record if isinstance(record, str) else record.decode("utf-8", "surrogateescape")
    installer_files = {dist_info + "/" + name for name in _INSTALLER_FILES}
    rows: List[str] = []
    append = rows.append
    for line in record_text.splitlines():
        if not line:
            continue
        path, digest = _record_row(line)
        if not digest:
            continue
        if "\\" in path or "./" in path or "//" in path or path.startswith("/"):
            path = posixpath.normpath(path.replace("\\", "/"))
            if path.startswith(("../", "/")) or path == "..":
                continue
        if path.endswith((".pyc", ".pyo")) or "__pycache__" in path or path in installer_files:
            continue
        append(path + "\0" + digest)
    rows.sort()
    import hashlib  # here: with the fingerprint cache warm, nothing is hashed

    return hashlib.sha256("\n".join(rows).encode("utf-8", "surrogateescape")).hexdigest()


def _redact_direct_url(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _redact_direct_url(v) for k, v in data.items()}
    if isinstance(data, str):
        return redact_url(data)
    return data


def _dist_from_dir_name(entry: str) -> Tuple[str, str]:
    stem = entry.rsplit(".", 1)[0]
    name, _, version = stem.partition("-")
    return name, version.split("-py")[0]


def read_distribution(
    site: str, entry: str, warnings: List[str], cache: Optional[DistCache] = None
) -> Optional[Dict[str, Any]]:
    """One installed distribution from its .dist-info or .egg-info; None if unreadable.
    ``cache``: records of .dist-info folders in which nothing changed, used instead of
    reading them, and fingerprints of unchanged RECORDs."""
    path = os.path.join(site, entry)
    is_dist_info = entry.endswith(".dist-info")
    if cache is not None and is_dist_info:
        held = cache.dist(path, site, entry)
        if held is not None and plausible(held):
            return held
    warned = len(warnings)
    listing: List[str] = []
    stamp = None
    if is_dist_info:
        # Stamped before anything is read, the folder before it is listed: a change while
        # it is read shows at the next run.
        own = file_stamp(path) if cache is not None else None
        try:  # one listing instead of a failed open() per optional file
            listing = os.listdir(path)
        except OSError:
            pass
        stamp = cache.stamp(path, listing, own) if cache is not None else None
        meta_path = os.path.join(path, "METADATA")
    elif os.path.isdir(path):
        meta_path = os.path.join(path, "PKG-INFO")
    else:
        meta_path = path
    dir_name, dir_version = _dist_from_dir_name(entry)
    requires: List[str] = []
    try:
        headers = metadata_headers(meta_path, requires)
    except OSError as exc:
        headers = {}
        warnings.append("%s: metadata unreadable (%s)" % (path, exc.strerror or exc))
    if len(requires) > MAX_REQUIRES:
        warnings.append(
            "%s: %d requirements; the first %d kept" % (path, len(requires), MAX_REQUIRES)
        )
        del requires[MAX_REQUIRES:]
    display = headers.get("Name") or dir_name
    version = headers.get("Version") or dir_version
    if not display or not version:
        warnings.append("%s: broken metadata (no name or version); skipped" % path)
        return None
    if not _one_line(display, version):
        warnings.append("%s: broken metadata (name or version not one line); skipped" % path)
        return None
    dist: Dict[str, Any] = {
        "name": canonical_name(display),
        "display_name": display,
        "version": version,
        "location": site,
        "metadata_dir": entry,
        "installer": None,
        "requested": False,
        "direct_url": None,
        "fingerprint": None,
        "requires": requires,
    }
    if not is_dist_info:
        return dist
    present = set(listing)
    installer = read_text(os.path.join(path, "INSTALLER")) if "INSTALLER" in present else None
    installer = installer.strip() if installer is not None else None
    if installer:
        # What the installer wrote of itself, as one line (escaped); a file over 512
        # characters names no installer.
        dist["installer"] = report_line(installer, 512)
        if dist["installer"] is None:
            warnings.append("%s: INSTALLER is over 512 characters; installer unknown" % path)
    dist["requested"] = "REQUESTED" in present
    raw_url = None
    if "direct_url.json" in present:
        raw_url = read_text(os.path.join(path, "direct_url.json"), SMALL_CAP)
    if raw_url is not None:
        import json

        try:
            data = json.loads(raw_url, parse_constant=not_json_constant)
            json.dumps(data, allow_nan=False)  # 1e400 parses as infinity
        except (ValueError, RecursionError):
            warnings.append("%s: direct_url.json is not valid JSON; source unknown" % path)
        else:
            if isinstance(data, dict):
                dist["direct_url"] = _redact_direct_url(data)
            else:
                warnings.append("%s: direct_url.json is not an object; source unknown" % path)
    record = None
    key = cache.record_key(path) if cache and "RECORD" in present else None
    known = cache.fingerprint(key) if cache is not None else None
    if known is not None:
        dist["fingerprint"] = known
    elif "RECORD" in present:
        try:
            record = read_bytes(os.path.join(path, "RECORD"), RECORD_CAP)
        except OSError as exc:
            warnings.append("%s: RECORD unreadable (%s)" % (path, exc.strerror or exc))
    if known is not None:
        pass
    elif record is None:
        if "RECORD" not in present:
            warnings.append("%s: no RECORD; content fingerprint unknown" % path)
    else:
        dist["fingerprint"] = record_fingerprint(record, entry)
        if cache is not None:
            cache.keep_fingerprint(key, dist["fingerprint"])
    if cache is not None and len(warnings) == warned:  # a record read with no doubt
        cache.keep_dist(path, stamp, sorted(present), dist)
    return dist


def _one_line(display: str, version: str) -> bool:
    """A name and a version a report may carry: one line each, 512 characters together."""
    return len(display + version) <= 512 and _printable(display + version)


def _printable(text: str) -> bool:
    """No character UNSAFE_CHARS names in ``text`` (each of them is unprintable: the
    search runs only for a text that is not printable, the rare case)."""
    return text.isprintable() or not _UNSAFE.search(text)


def plausible(dist: Dict[str, Any]) -> bool:
    """A kept record holds what read_distribution() could have read: anything else (a
    cache file edited by hand) is read again rather than fail the report."""
    display, version, requires = dist["display_name"], dist["version"], dist["requires"]
    fingerprint, installer = dist["fingerprint"], dist["installer"]
    return (
        type(display) is str
        and type(version) is str
        and bool(display and version)
        and _one_line(display, version)
        and dist["name"] == canonical_name(display)
        and type(dist["requested"]) is bool
        and (
            installer is None
            or (type(installer) is str and len(installer) <= 512 and installer.isprintable())
        )
        and (fingerprint is None or (type(fingerprint) is str and len(fingerprint) == 64))
        and (
            dist["direct_url"] is None
            or (type(dist["direct_url"]) is dict and json_plain(dist["direct_url"]))
        )
        and type(requires) is list
        and len(requires) <= MAX_REQUIRES
        # Whole-list checks at C speed (a character class: joining makes no new match).
        and all(type(r) is str for r in requires)
        and max(map(len, requires), default=0) <= 512
        and _printable("".join(requires))
    )


# The most values json_plain() looks at in one value (a direct_url.json is a few).
PLAIN_NODES = 4096


def json_plain(value: Any) -> bool:
    """``value`` is one JSON could have given: texts, finite or not numbers, true, false,
    null, lists and maps with text keys, PLAIN_NODES values at most (a kept record is
    read with marshal, which can give any of its types, and nest or share them)."""
    todo, seen = [value], 0
    while todo:
        item = todo.pop()
        seen += 1
        if seen > PLAIN_NODES:
            return False
        kind = type(item)
        if kind is dict:
            if not all(type(key) is str for key in item):
                return False
            todo.extend(item.values())
        elif kind is list:
            todo.extend(item)
        elif not (item is None or kind is str or kind is int or kind is float or kind is bool):
            return False
    return True


def reported(packages: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """``packages`` as the report carries them: the folder names (its .dist-info, its
    site-packages) as one line each, escaped where the file system holds what a line may
    not (``odd\\u202e-1.0.dist-info``). The records themselves keep the real names: the
    probe reads RECORD and the installed files through them."""
    out = []
    for dist in packages:
        location, folder = dist["location"], dist["metadata_dir"]
        if not (location + folder).isprintable():
            dist = dict(dist, location=escaped_name(location), metadata_dir=escaped_name(folder))
        out.append(dist)
    return out


def site_dirs() -> List[str]:
    """purelib and platlib of this interpreter (the set `uv pip freeze` reports)."""
    # The prefixes passed explicitly: sysconfig may have read sys.prefix before enter_venv().
    # In a venv, the venv scheme by name: Debian's and Ubuntu's Pythons default to
    # posix_local (<venv>/local/lib/.../dist-packages, where nothing is installed), decided
    # while sys.prefix was still /usr; a venv made from them then read as empty.
    scheme = None
    if sys.prefix != sys.base_prefix:
        names = sysconfig.get_scheme_names()
        scheme = "venv" if "venv" in names else "posix_prefix" if os.name == "posix" else None
    variables = {"base": sys.prefix, "platbase": sys.exec_prefix}
    paths = (
        sysconfig.get_paths(scheme, vars=variables)
        if scheme
        else sysconfig.get_paths(vars=variables)
    )
    out: List[str] = []
    for key in ("purelib", "platlib"):
        path = paths.get(key)
        if path and path not in out:
            out.append(path)
    return out


def scan_packages(
    sites: List[str], warnings: List[str], cache: Optional[DistCache] = None
) -> List[Dict[str, Any]]:
    """Every distribution in ``sites``; a name seen again later is kept but marked shadowed.
    ``cache``: RECORD fingerprints of unchanged files, looked up instead of hashed."""
    packages: List[Dict[str, Any]] = []
    seen: Dict[str, Dict[str, Any]] = {}
    for site in sites:
        try:
            entries = sorted(os.listdir(site))
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            outside = leads_out(os.path.join(site, entry), sys.prefix)
            if outside is not None:
                warnings.append(
                    "%s/%s is a link out of the venv (to %s); not read" % (site, entry, outside)
                )
                continue
            dist = read_distribution(site, entry, warnings, cache)
            if dist is None:
                continue
            first = seen.get(dist["name"])
            dist["shadowed"] = first is not None
            if first is None:
                seen[dist["name"]] = dist
            else:
                warnings.append(
                    "%s %s in %s is shadowed by %s %s in %s"
                    % (
                        dist["name"],
                        dist["version"],
                        site,
                        first["name"],
                        first["version"],
                        first["location"],
                    )
                )
            packages.append(dist)
    return packages
