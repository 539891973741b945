"""The probe's packed sources and code key, kept between runs: what every probe of one
envguard install sends is the same, and building it (reading, hashing and compressing the
target modules) cost each probe its start.

One file per entry and install in the user's cache folder (``$XDG_CACHE_HOME/envguard``,
else ``~/.cache/envguard``, where the target keeps the compiled code), named by a checksum
of its stamp and holding the stamp whole: the (device, inode, size, mtime, ctime) of every
file the payload is built from, and the host's Python and zlib. A file is used only when
its stamp is exactly today's, the folder and the file are this user's and no one else can
write to them, neither is a symlink, the file is regular and small, and its header, names,
key and checksum all agree with what it carries; anything else is rebuilt as if there were
no file. A cache that cannot be written is not written. docs/security.md says what someone
who can write this folder gains (nothing the target's code cache beside it did not give).

Standard library only, and cheap to import: it is on the way to the probe's start.
"""

from __future__ import annotations

import os
import sys
import time
import zlib

from envguard.probe.loader import code_folder, keep_private, read_private

_MAGIC = "envguard-payload 1"
_CAP = 4 << 20  # a file past this is not a payload this version wrote
_FILES = 8  # the newest kept: the probe's and restore's, for a few installs or versions
# A source changed less than this long ago may change again within its timestamps'
# granularity without its stamp changing (git's "racily clean" index entries): such a
# stamp proves nothing, and nothing is kept under it.
_SETTLED_NS = 2_000_000_000
_HEX = frozenset("0123456789abcdef")


def stamp(paths: list[str]) -> str | None:
    """What the payload built from ``paths`` depends on, as one line; None when a file
    cannot be stat'ed (then nothing is kept or used)."""
    parts = [_MAGIC, sys.version.replace("\n", " "), zlib.ZLIB_RUNTIME_VERSION]
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            return None
        parts.append(
            f"{path}:{st.st_dev},{st.st_ino},{st.st_size},{st.st_mtime_ns},{st.st_ctime_ns}"
        )
    line = ";".join(parts)
    try:
        line.encode("utf-8")  # a path's undecodable bytes (surrogates) are not written
    except UnicodeEncodeError:
        return None
    return line if "\n" not in line else None


def settled(paths: list[str]) -> bool:
    """Whether every one of ``paths`` was last changed long enough ago for its stamp to
    name its content (see _SETTLED_NS)."""
    now = time.time_ns()
    try:
        return all(
            now - max(st.st_mtime_ns, st.st_ctime_ns) >= _SETTLED_NS for st in map(os.stat, paths)
        )
    except OSError:
        return False


def _file(folder: str, entry: str, line: str) -> str:
    return os.path.join(folder, f"payload-{entry}-{zlib.crc32(line.encode()):08x}.txt")


def read(
    entry: str, line: str, *, allowed: tuple[str, ...]
) -> tuple[tuple[str, ...], str, str] | None:
    """(names, packed text, code key) kept for ``entry`` under the stamp ``line``, each of
    the names one of ``allowed`` (in that order, ``entry`` among them); None when there is
    no such file, or it is anything but exactly what write() wrote for this stamp."""
    folder = code_folder()
    data = None if folder is None else read_private(_file(folder, entry, line), _CAP)
    try:
        text = "" if data is None else data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return _parsed(text, entry=entry, line=line, allowed=allowed)


def _parsed(
    text: str, *, entry: str, line: str, allowed: tuple[str, ...]
) -> tuple[tuple[str, ...], str, str] | None:
    head = text.split("\n", 4)
    if len(head) != 5 or head[0] != _MAGIC or head[1] != line:
        return None
    fields, names, packed = head[2].split(" "), tuple(head[3].split(" ")), head[4]
    if len(fields) != 4 or fields[0] != entry:
        return None
    key, crc, length = fields[1], fields[2], fields[3]
    if len(key) != 32 or not _HEX.issuperset(key) or not (crc + length).isascii():
        return None
    if not (crc.isdigit() and length.isdigit()):
        return None
    if entry not in names or not set(names) <= set(allowed):
        return None
    if list(names) != [n for n in allowed if n in names]:
        return None  # the install order is the target modules' own
    if len(packed) != int(length) or _checksum(line, entry, key, names, packed) != int(crc):
        return None  # truncated, or changed since it was written
    return names, packed, key


def _checksum(line: str, entry: str, key: str, names: tuple[str, ...], packed: str) -> int:
    """What catches a damaged file: the CRC-32 of all it says (not a defence against a
    forger, who could write the target's code cache as easily: docs/security.md)."""
    said = "\n".join([line, entry, key, " ".join(names), packed])
    return zlib.crc32(said.encode("utf-8"))


def write(entry: str, line: str, *, names: tuple[str, ...], packed: str, key: str) -> None:
    """Keep (names, packed, key) for ``entry`` under the stamp ``line``; never fails."""
    folder = code_folder()
    if folder is None:
        return
    path = _file(folder, entry, line)
    crc = _checksum(line, entry, key, names, packed)
    body = f"{_MAGIC}\n{line}\n{entry} {key} {crc} {len(packed)}\n{' '.join(names)}\n{packed}"
    keep_private(path, body.encode("utf-8"), "payload-", ".txt", _FILES)
