"""A cache of what each installed distribution's metadata says, on the target, so an
unchanged venv is neither parsed nor hashed again.

Its entries are keyed by ``os.stat`` results, never by content:

- **distributions**: a .dist-info folder's whole record (name, version, requirements,
  installer, PEP 610 source, fingerprint), kept under the folder's path with a *stamp*: the
  folder's own (device, inode, mtime_ns, ctime_ns) and the (device, inode, size, mtime_ns,
  ctime_ns) of every file the record was read from. Adding, removing or renaming a file in
  the folder changes its mtime and ctime; rewriting a file in place changes that file's;
  ctime cannot be put back from user space. A reinstall writes a new folder. Any
  difference, and the folder is read again.
- **fingerprints**: RECORD's fingerprint under RECORD's own stamp, for a folder that changed
  around an unchanged RECORD (REQUESTED added, say): hashing RECORD is the costly part.
- **bytecode folders**: a ``__pycache__`` folder whose every pyc Python would load was found
  its source's (loaded.py), under the folder's own stamp: its pyc names, and one digest of
  the stamps of every pyc and source in it. Adding, removing or renaming a pyc changes the
  folder's stamp; rewriting one in place changes the digest. One entry a folder, where one
  a pyc made the file 25 times larger (a 135-distribution venv: 5.2 MB, 50 ms to load).
- **libraries**: what a GPU library's ELF headers and read-only data say (libs.py), under
  the library file's own stamp: searching a 250 MB libnccl for its version is the costly
  part.
- **RECORD rows**: the rows of the files that run (installed.py: parse_rows()'s) and of the
  console scripts (loaded.script_rows, which checks each row it takes), under RECORD's own
  stamp, with a CRC-32 of their text (rows_sum): rows edited by hand or damaged are read
  from RECORD again. installed.py takes rows whose checksum agrees as they are, without
  telling each plausible again at every probe (on a 135-distribution venv, those scans
  took 9 ms before every check). Rows planted with their checksum are used: only this user
  (or root) can write the cache (see below), as they can the probe's kept code in the
  folder above, which the target runs (docs/security.md).

A record is not kept while anything it was read from changed less than ``quiet`` seconds
ago (60 by default; git's "racily clean" rule): a write through a shared mmap, or on a file
system with coarse timestamps, can change a file without moving its times again. Nothing
reached through a symlink is kept (a link flipped and flipped back leaves every stamp as it
was). Each file is tied to the probe's own code (``code``: a hash of its sources, from the
host): another envguard's records, which may read metadata otherwise, are not used; only its
verdicts that no code can read otherwise are (a file's hash, a folder's bytecode: see
VERDICTS), so an upgrade of envguard does not hash and compile a venv afresh.

The cache lives in the user's cache folder ($XDG_CACHE_HOME/envguard/dists-v4, else
~/.cache/envguard/...), never inside site-packages: one file per venv (named by a checksum
of its site-packages folders), at most _MAX_SHARDS files, the least recently written removed
first. It is used only when the folders and the file belong to this user and no one else
can write to them; a damaged, foreign or unwritable cache is simply not used. It is written
by marshal, as the probe's kept code in the folder above is (json took 3.4 times as long to
read it, and every probe reads it before its check starts: 5.4 ms for the bench venv's 2.5
MB), behind a mark and its length (sealed()), and read only under the same rule as that
code, which the target runs: a file cut short, another program's, or one marshal cannot
read (a malformed code object) is no cache. What it gives is checked as JSON's was (plain
texts, numbers, lists and maps of the shapes their readers wrote; a kept direct_url as
JSON could hold it; a bytecode folder's entry when it is looked up), and what it holds is
never executed: it goes into the report, which the host validates as it validates every
report, and kept RECORD rows (their folders too) name the files the check stats and
hashes. The JSON file an earlier envguard kept (dists-v3) gives its verdicts once, then is
removed.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import marshal
import os
from itertools import islice

from .reading import envguard_cache, parse_json, read_bytes, write_all

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

_FOLDER = "dists-v4"
# What earlier versions wrote: removed when this cache is saved (the JSON files of the
# last, read for their verdicts while this one has none: see DistCache).
_LEGACY_FILE = "fingerprints-v1.json"
_LEGACY_FOLDERS = ("fingerprints-v2", "dists-v3")
_JSON_FOLDER = "dists-v3"
_CAP = 32 << 20
_MAX_ENTRIES = 20000  # per venv and kind
_MAX_SHARDS = 256
QUIET_SECONDS = 60.0
# What the kept verdicts mean ("verified": a file of that stamp hashed to that digest;
# "pycdirs": see loaded.py). Raise it when a change of the check could make an earlier
# verdict wrong: every envguard of the same number takes the others' verdicts.
VERDICTS = 2
# 2: no folder verdict where a flood of names cut its listing, where the folder changed
# within the quiet time, or around a pyc whose stem is no ASCII identifier (an envguard of
# 1 kept such verdicts: a planted pyc may hide behind them).
_HEX = "0123456789abcdef"
# The files of a .dist-info a distribution's record is read from.
READ_FROM = ("METADATA", "INSTALLER", "direct_url.json", "RECORD")
# The files of a .dist-info stamped with it (its record's stamp): those, and WHEEL, whose
# time installed.py reads (when the wheel was unpacked) from the same stamps.
STAMPED = (*READ_FROM, "WHEEL")
# A record as read_distribution() builds it (before scan_packages marks it shadowed).
_DIST_KEYS = frozenset(
    {"name", "display_name", "version", "location", "metadata_dir", "installer"}
    | {"requested", "direct_url", "fingerprint", "requires"}
)


def _ours(path: str) -> bool:
    """``path`` does not exist, or is no symlink, belongs to this user and no one else can
    write to it."""
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return (
        not stat.S_ISLNK(st.st_mode)
        and st.st_uid == os.getuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def _make_private(folder: str) -> None:
    """``folder`` and its parent (``envguard/``), each made 0700 where missing: makedirs
    gives the parent 0777 less the umask, and under ``umask 000`` (some CI images) that
    parent is writable by all, so the cache would be refused for ever."""
    parent = os.path.dirname(folder)
    os.makedirs(os.path.dirname(parent), exist_ok=True)
    for path in (parent, folder):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass


def cache_path(environ: Dict[str, str]) -> Optional[str]:
    """The folder of the per-venv cache files, or None when there is no home."""
    base = envguard_cache(environ)
    return os.path.join(base, _FOLDER) if base else None


def record_key(record_path: str) -> Optional[str]:
    """A RECORD's fingerprint key: its path and stamp; None when it cannot be read."""
    stamp = file_stamp(record_path)
    return None if stamp is None else record_path + "\0" + stamp


def file_stamp(path: str) -> Optional[str]:
    """(device, inode, size, mtime_ns, ctime_ns) of ``path`` as text; None if absent or a
    symlink (never stamped: see above)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if st.st_mode & 0o170000 == 0o120000:
        return None
    # ctime too: a rewrite of the same size with the mtime put back still changes it.
    return "%d,%d,%d,%d,%d" % (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def file_stamps(
    folder: str, present: List[str], own: Optional[str] = None
) -> Optional[Dict[str, str]]:
    """The stamps of a .dist-info ``folder`` whose listing is ``present``: its own (under
    "", ``own`` when taken before it was listed) and that of each STAMPED file there, by
    name; None when one cannot be taken (a symlink, a file gone). Taken before the files
    are read, so a change while they are read is seen at the next run."""
    stamps = {"": own if own is not None else file_stamp(folder)}
    for name in STAMPED:
        if name in present:
            stamps[name] = file_stamp(folder + os.sep + name)
    return None if None in stamps.values() else stamps  # type: ignore[return-value]


def dist_stamp(stamps: Optional[Dict[str, str]]) -> Optional[str]:
    """The one stamp of a .dist-info's record: its file_stamps() joined."""
    return None if stamps is None else ";".join(stamps.values())


def stamp_mtime(stamp: str) -> int:
    """The mtime_ns of a file_stamp()."""
    return int(stamp.split(",", 4)[3])


def _newest_change(stamp: str) -> int:
    """The latest ctime_ns in a stamp."""
    return max(int(part.rsplit(",", 1)[1]) for part in stamp.split(";"))


def _valid_dist(entry: Any) -> bool:
    """The shape of a kept entry (what its values may be: dists.plausible())."""
    if not (type(entry) is dict and entry.keys() == _ENTRY_KEYS and type(entry["stamp"]) is str):
        return False
    present, dist = entry.get("present"), entry.get("dist")
    return (
        type(present) is list
        and all(type(n) is str for n in present)
        and type(dist) is dict
        and dist.keys() == _DIST_KEYS
        and type(dist["requires"]) is list
    )


_ENTRY_KEYS = frozenset({"stamp", "present", "dist"})
# What a cache file starts with: this mark, then the length of the marshal data after it.
_MAGIC = b"envguard-dists\0"


def sealed(kept: Dict[str, Any]) -> bytes:
    """``kept`` as its file holds it (marshal version 2: no shared references, so each value
    is an object of its own when read back, as each was from JSON)."""
    data = marshal.dumps(kept, 2)
    return _MAGIC + b"%016x" % len(data) + data


def unsealed(raw: bytes) -> Any:
    """What sealed() wrote, or None: a file cut short, another program's or another
    format's, or what marshal cannot read (a malformed code object raises SystemError)."""
    head = len(_MAGIC) + 16
    if not raw.startswith(_MAGIC) or raw[len(_MAGIC) : head] != b"%016x" % (len(raw) - head):
        return None
    try:
        return marshal.loads(memoryview(raw)[head:])
    except Exception:
        return None


def _as_json(value: Any) -> Any:
    """``value`` as a JSON round trip gives it back: every tuple a list, every key text."""
    kind = type(value)
    if kind is tuple or kind is list:
        return [_as_json(item) for item in value]
    if kind is dict:
        return {_json_key(key): _as_json(item) for key, item in value.items()}
    return value


def _json_key(key: Any) -> str:
    if type(key) is str:
        return key
    if type(key) is bool or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    if type(key) is float and (key != key or key in (_INFINITY, -_INFINITY)):
        return "NaN" if key != key else "Infinity" if key > 0 else "-Infinity"
    return repr(key)  # an int's or a float's, as json writes it


_INFINITY = float("inf")


def _earlier(base: str, name: str) -> Any:
    """The JSON file an earlier envguard kept for this venv (read for its verdicts), or
    None; under the same rule as this cache's own file."""
    folder = os.path.join(base, _JSON_FOLDER)
    path = os.path.join(folder, name + ".json")
    if not (_ours(folder) and _ours(path)):
        return None
    try:
        return parse_json(read_bytes(path, _CAP).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None


def hex_digits(text: str, length: int) -> bool:
    """``text`` is ``length`` lowercase hex digits (a regular expression would import re
    on the way to a probe's first step: reading.Regex)."""
    return len(text) == length and not text.strip(_HEX)


def rows_sum(rows: List[str]) -> str:
    """The CRC-32 of kept RECORD rows' texts, in hex (zlib's: the cache's own module; a
    checksum against damage and edits, not forgery: see the module's docstring)."""
    import zlib

    return "%08x" % zlib.crc32("\0".join(rows).encode("utf-8", "surrogatepass"))


def _rows(value: Any) -> bool:
    """The shape of kept RECORD rows: three or four texts and their checksum (record_rows
    checks that it agrees; its reader, how many texts it keeps)."""
    return (
        type(value) is list
        and 4 <= len(value) <= 5
        and all(type(part) is str for part in value)
        and hex_digits(value[-1], 8)
    )


def _pycdir(value: Any) -> bool:
    """A bytecode folder's entry as keep_pyc_folder writes it (names are checked again by
    their reader, loaded.py)."""
    return (
        type(value) is list
        and len(value) == 2
        and type(value[0]) is str
        and type(value[1]) is str
        and hex_digits(value[1], 32)
    )


class DistCache:
    """One venv's cached records: ``dist``/``fingerprint`` before reading, ``keep_dist``/
    ``keep_fingerprint`` after, ``save`` once the venv was scanned."""

    def __init__(
        self,
        folder: Optional[str],
        sites: List[str],
        code: Optional[str] = None,
        quiet: float = QUIET_SECONDS,
    ) -> None:
        import time
        import zlib

        self.code = code
        # Records of files that changed after this are not kept (see above).
        self.settled_ns = time.time_ns() - int(quiet * 1e9)
        self.path: Optional[str] = None
        self.fingerprints: Dict[str, str] = {}
        self.dists: Dict[str, Dict[str, Any]] = {}
        self.used_fingerprints: Dict[str, str] = {}
        self.used_dists: Dict[str, Dict[str, Any]] = {}
        # RECORD rows of the files that run (installed.py), under RECORD's own stamp.
        self.rows: Dict[str, List[str]] = {}
        self.used_rows: Dict[str, List[str]] = {}
        # Installed files hashed and found as RECORD says, under their own stamp: a venv
        # copied without its times (docker cp, rsync without -t) is hashed once, not at
        # every probe.
        self.verified: Dict[str, int] = {}
        self.used_verified: Dict[str, int] = {}
        # Whether this run checked installed files: when it did not (``--verify off``, or
        # the check overran), the rows and verdicts held are kept as they were.
        self.files_checked = False
        self.libs: Dict[str, Dict[str, Any]] = {}
        self.used_libs: Dict[str, Dict[str, Any]] = {}
        # __pycache__ folders found clean (loaded.py): [pyc names, digest of their stamps].
        self.pycdirs: Dict[str, List[str]] = {}
        self.used_pycdirs: Dict[str, List[str]] = {}
        # .dist-info folder -> its file_stamps(), as this run took them (stamp())
        self.stamped: Dict[str, Dict[str, str]] = {}
        if folder is None or not (_ours(folder) and _ours(os.path.dirname(folder))):
            return  # a folder someone else could fill (or a symlink): no cache
        # Named by a checksum of the venv's site folders (zlib: hashlib is slow to load, and
        # a collision only makes two venvs share one file, keyed by full paths as ever).
        key = "\0".join(sites).encode("utf-8", "surrogateescape")
        name = "%08x%08x" % (zlib.crc32(key), zlib.adler32(key))
        self.path = os.path.join(folder, name + ".bin")
        if os.path.lexists(self.path) and not _ours(self.path):
            return  # not ours to trust; rewritten below from what this run computes
        try:
            data = unsealed(read_bytes(self.path, _CAP))
        except FileNotFoundError:
            data = _earlier(os.path.dirname(folder), name)
        except OSError:
            return  # unreadable: start afresh
        if type(data) is not dict:
            return  # damaged: rewritten from this run
        if data.get("code") != code:
            # Another envguard's (an upgrade): rewritten from this run, but for the verdicts
            # that mean the same to every envguard of this VERDICTS (a file's bytes hash to
            # RECORD's digest; a folder's pycs are what its sources compile to): keeping
            # them spares the minutes an upgrade would spend hashing and compiling again.
            if data.get("verdicts") == VERDICTS:
                self._take_verdicts(data, False)
            return
        self._take_verdicts(data, True)
        fingerprints, dists = data.get("fingerprints"), data.get("dists")
        if type(fingerprints) is dict:
            self.fingerprints = {
                k: v
                for k, v in fingerprints.items()
                if type(k) is str and type(v) is str and hex_digits(v, 64)
            }
        if type(dists) is dict:
            self.dists = {k: v for k, v in dists.items() if type(k) is str and _valid_dist(v)}
        rows = data.get("rows")
        if type(rows) is dict:
            self.rows = {k: v for k, v in rows.items() if type(k) is str and _rows(v)}
        libs = data.get("libs")
        if type(libs) is dict:
            self.libs = {
                k: v
                for k, v in libs.items()
                if type(k) is str and type(v) is dict and type(v.get("stamp")) is str
            }

    def _take_verdicts(self, data: Dict[str, Any], all_kinds: bool) -> None:
        """The kept verdicts of ``data``; not ``all_kinds``: only those whose meaning no
        code of the check can change (a folder's "nothing added" depends on which files
        count as running: see installed.runs)."""
        verified = data.get("verified")
        if type(verified) is dict:
            self.verified = {
                k: 1
                for k, v in verified.items()
                if type(k) is str and v == 1 and (all_kinds or not k.startswith("added\0"))
            }
        pycdirs = data.get("pycdirs")
        if type(pycdirs) is dict:
            # each entry is told sound when it is looked up (pyc_folder): the shares of the
            # check look them up beside each other, where telling all of them here was 2
            # ms of every probe's serial start
            self.pycdirs = pycdirs

    def dist(self, folder: str, site: str, entry: str) -> Optional[Dict[str, Any]]:
        """The record of the .dist-info ``folder`` when nothing it was read from changed
        (a copy: the caller may change it), else None."""
        held = self.dists.get(folder)
        if held is None or (held["dist"]["location"], held["dist"]["metadata_dir"]) != (
            site,
            entry,
        ):
            return None
        if self.stamp(folder, held["present"]) != held["stamp"]:
            return None
        self.used_dists[folder] = held
        dist = dict(held["dist"])
        dist["requires"] = list(dist["requires"])
        return dist

    def stamp(self, folder: str, present: List[str], own: Optional[str] = None) -> Optional[str]:
        """dist_stamp() of a .dist-info ``folder`` (see file_stamps), its files' stamps kept
        for this run (stamps_of): a RECORD is not stamped twice."""
        stamps = file_stamps(folder, present, own)
        if stamps is None:
            self.stamped.pop(folder, None)
        else:
            self.stamped[folder] = stamps
        return dist_stamp(stamps)

    def stamps_of(self, folder: str) -> Optional[Dict[str, str]]:
        """The stamps stamp() took of ``folder`` in this run (by file name), if it did."""
        return self.stamped.get(folder)

    def record_key(self, folder: str) -> Optional[str]:
        """record_key() of the RECORD in the .dist-info ``folder``, from the stamp this run
        took of it (stamp()) where it took one."""
        record = folder + os.sep + "RECORD"
        stamp = self.stamped.get(folder, {}).get("RECORD")
        return record_key(record) if stamp is None else record + "\0" + stamp

    def keep_dist(
        self, folder: str, stamp: Optional[str], present: List[str], dist: Dict[str, Any]
    ) -> None:
        if stamp is not None and _newest_change(stamp) < self.settled_ns:
            record = {k: v for k, v in dist.items() if k in _DIST_KEYS}
            record["requires"] = list(record["requires"])
            self.used_dists[folder] = {"stamp": stamp, "present": present, "dist": record}

    def fingerprint(self, key: Optional[str]) -> Optional[str]:
        found = self.fingerprints.get(key) if key else None
        if found is not None and key is not None:
            self.used_fingerprints[key] = found
        return found

    def keep_fingerprint(self, key: Optional[str], fingerprint: str) -> None:
        if key is not None and _newest_change(key.split("\0", 1)[1]) < self.settled_ns:
            self.used_fingerprints[key] = fingerprint

    def record_rows(self, key: Optional[str], texts: int = 3) -> Optional[List[str]]:
        """The ``texts`` texts kept under ``key`` (installed.py: paths, sizes, hashes and
        folders of an unchanged RECORD's rows of the files that run, each joined), as they
        were kept (their checksum agrees), or None."""
        self.files_checked = True
        found = self.rows.get(key) if key else None
        if found is None or key is None or len(found) != texts + 1:
            return None
        if found[texts] != rows_sum(found[:texts]):
            return None
        self.used_rows[key] = found
        return found[:texts]

    def keep_record_rows(self, key: Optional[str], rows: List[str]) -> None:
        """Keep ``rows`` (texts: record_rows) under ``key``, summed."""
        if key is not None and _newest_change(key.split("\0", 1)[1]) < self.settled_ns:
            self.used_rows[key] = [*rows, rows_sum(rows)]

    def was_verified(self, key: str) -> bool:
        self.files_checked = True
        if key in self.verified:
            self.used_verified[key] = 1
            return True
        return False

    def keep_verified(self, key: str, ctime_ns: int) -> None:
        self.files_checked = True
        if ctime_ns < self.settled_ns:
            self.used_verified[key] = 1

    def pyc_folder(self, key: str) -> Optional[List[str]]:
        """[pyc names joined by newlines, digest] of a ``__pycache__`` folder found clean
        under this stamp (``key``), or None."""
        self.files_checked = True
        found = self.pycdirs.get(key)
        if found is None or not _pycdir(found):
            return None
        self.used_pycdirs[key] = found
        return found

    def keep_pyc_folder(self, key: str, names: str, digest: str, newest_ns: int) -> None:
        self.files_checked = True
        if newest_ns < self.settled_ns:
            self.used_pycdirs[key] = [names, digest]

    def mark(self) -> List[int]:
        """Where what this run used ends now: a forked share's checked() answers only what
        came after (entries are added, never moved: dicts keep their order)."""
        return [len(self.used_rows), len(self.used_verified), len(self.used_pycdirs)]

    def rewind(self, mark: List[int], files_checked: bool) -> None:
        """Forget what was used after ``mark`` (mark()), ``files_checked`` as it was then:
        a check begun and cancelled (installed.Checking.cancel) read what this run did not
        ask for, and a run that checks nothing keeps the verdicts held as they were."""
        rows, verified, pycdirs = mark
        self.used_rows = dict(islice(self.used_rows.items(), rows))
        self.used_verified = dict(islice(self.used_verified.items(), verified))
        self.used_pycdirs = dict(islice(self.used_pycdirs.items(), pycdirs))
        self.files_checked = files_checked

    def checked(self, since: Optional[List[int]] = None) -> Dict[str, Any]:
        """What the installed-files check used and learned after ``since`` (mark(); None:
        all of it), as plain JSON (it runs in a forked child: see installed.Checking): new
        rows and folders in full, held ones by their place among those loaded (the same in
        every copy of this cache: a folder's key is 100 bytes, its place 4)."""
        rows_from, verified_from, pycdirs_from = since or (0, 0, 0)
        rows = dict(islice(self.used_rows.items(), rows_from, None))
        pycdirs = dict(islice(self.used_pycdirs.items(), pycdirs_from, None))
        return {
            "rows": {k: v for k, v in rows.items() if self.rows.get(k) != v},
            "held": _places(self.rows, [k for k, v in rows.items() if self.rows.get(k) == v]),
            "verified": list(islice(self.used_verified, verified_from, None)),
            "pycdirs": {k: v for k, v in pycdirs.items() if self.pycdirs.get(k) != v},
            "held_pycdirs": _places(
                self.pycdirs, [k for k, v in pycdirs.items() if self.pycdirs.get(k) == v]
            ),
        }

    def take_checked(self, found: Dict[str, Any]) -> None:
        """What checked() answered, in the child, taken into this cache."""
        rows, held, verified = found.get("rows"), found.get("held"), found.get("verified")
        if type(rows) is dict:
            self.used_rows.update((k, v) for k, v in rows.items() if type(k) is str and _rows(v))
        for k in _placed(self.rows, held):
            self.used_rows[k] = self.rows[k]
        if type(verified) is list:
            self.used_verified.update((k, 1) for k in verified if type(k) is str)
        pycdirs = found.get("pycdirs")
        if type(pycdirs) is dict:
            self.used_pycdirs.update(
                (k, v) for k, v in pycdirs.items() if type(k) is str and _pycdir(v)
            )
        for k in _placed(self.pycdirs, found.get("held_pycdirs")):
            self.used_pycdirs[k] = self.pycdirs[k]
        self.files_checked = True

    def lib(self, path: str, stamp: Optional[str]) -> Optional[Dict[str, Any]]:
        """What was read from the library at ``path`` when its stamp is still ``stamp``
        (its shape is the reader's to check: libs.plausible_lib), else None."""
        held = self.libs.get(path)
        if held is None or stamp is None or held["stamp"] != stamp:
            return None
        self.used_libs[path] = held
        return held

    def keep_lib(self, path: str, stamp: Optional[str], record: Dict[str, Any]) -> None:
        """Keep ``record`` as its reader will be given it back: as JSON holds it (its
        tuples lists), which is what each reader checks (marshal would keep a tuple)."""
        if stamp is not None and _newest_change(stamp) < self.settled_ns:
            self.used_libs[path] = dict(_as_json(record), stamp=stamp)

    def abandon(self) -> None:
        """Write nothing of this run: a check left running in a thread still fills it."""
        self.path = None

    def save(self) -> None:
        """Write this venv's entries when they changed; never fails."""
        if not self.files_checked:  # nothing learned about them: kept as they were
            self.used_rows, self.used_verified = self.rows, self.verified
            # (the sound ones: entries are told when looked up, and none was)
            self.used_pycdirs = {
                k: v for k, v in self.pycdirs.items() if type(k) is str and _pycdir(v)
            }
        if self.path is None or (
            self.used_fingerprints == self.fingerprints
            and self.used_dists == self.dists
            and self.used_rows == self.rows
            and self.used_verified == self.verified
            and self.used_pycdirs == self.pycdirs
            and self.used_libs == self.libs
        ):
            return  # nothing new learned
        kept = {
            "code": self.code,
            "verdicts": VERDICTS,
            "fingerprints": dict(list(self.used_fingerprints.items())[:_MAX_ENTRIES]),
            "dists": dict(list(self.used_dists.items())[:_MAX_ENTRIES]),
            "rows": dict(list(self.used_rows.items())[:_MAX_ENTRIES]),
            "verified": dict(list(self.used_verified.items())[:_MAX_ENTRIES]),
            "pycdirs": dict(list(self.used_pycdirs.items())[:_MAX_ENTRIES]),
            "libs": dict(list(self.used_libs.items())[:_MAX_ENTRIES]),
        }
        folder = os.path.dirname(self.path)
        tmp = "%s.%d.tmp" % (self.path, os.getpid())
        try:
            _make_private(folder)
            if not (_ours(folder) and _ours(os.path.dirname(folder))):
                return
            data = sealed(kept)
            if len(data) > _CAP:
                return  # it would not be read back
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                write_all(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except (OSError, ValueError, MemoryError):
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return
        _prune(folder, os.path.basename(self.path)[: -len(".bin")])


def _prune(folder: str, own: str) -> None:
    """At most _MAX_SHARDS venv files (the least recently written go first), and none of
    earlier versions' files (of the last, only this venv's, named ``own``: another venv's
    gives its verdicts once that one is saved); only this user's own regular files are
    removed."""
    import stat

    parent = os.path.dirname(folder)
    try:
        if os.path.lexists(os.path.join(parent, _LEGACY_FILE)) and _ours(
            os.path.join(parent, _LEGACY_FILE)
        ):
            os.unlink(os.path.join(parent, _LEGACY_FILE))
        for legacy in _LEGACY_FOLDERS:
            old = os.path.join(parent, legacy)
            if not os.path.isdir(old) or os.path.islink(old) or not _ours(old):
                continue
            for entry in os.listdir(old):
                mine = legacy != _JSON_FOLDER or entry == own + ".json"
                if mine and entry.endswith(".json") and _ours(os.path.join(old, entry)):
                    try:
                        os.unlink(os.path.join(old, entry))
                    except OSError:  # (a folder of that name) the others are still removed
                        continue
            if not os.listdir(old):
                os.rmdir(old)
    except OSError:
        pass
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".bin")]
    except OSError:
        return
    if len(names) <= _MAX_SHARDS:
        return
    aged = []
    for name in names:
        try:
            st = os.lstat(os.path.join(folder, name))
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
            aged.append((st.st_mtime_ns, name))
    for _, name in sorted(aged)[: len(aged) - _MAX_SHARDS]:
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass


def _places(loaded: Dict[str, Any], keys: List[str]) -> List[int]:
    """The places of ``keys`` among the keys of ``loaded``."""
    if not keys:
        return []
    order = {k: i for i, k in enumerate(loaded)}
    return [order[k] for k in keys]


def _placed(loaded: Dict[str, Any], places: Any) -> List[str]:
    """The keys of ``loaded`` at ``places`` (_places' answer; anything else is ignored)."""
    if type(places) is not list or not places:
        return []
    keys = list(loaded)
    return [keys[i] for i in places if type(i) is int and 0 <= i < len(keys)]
