"""Reading files on behalf of untrusted input: regular files only, never blocking, capped."""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

# Caps per kind of file: a damaged or hostile site-packages must not exhaust memory.
METADATA_CAP = 16 << 20
RECORD_CAP = 64 << 20
SMALL_CAP = 1 << 20  # INSTALLER, direct_url.json, torch/version.py


# Characters that must never reach a terminal or a one-line field as themselves: C0 and C1
# controls, DEL, and the bidirectional marks and overrides that reorder what a terminal
# shows (U+061C, U+200E/F, U+202A-E, U+2066-9); U+2028/9 end a line as "\n" does. A regular
# expression character class body, shared by the output escaping (render.text.printable),
# the snapshot models' one-line fields and the probe report's validator.
UNSAFE_CHARS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"


def not_json_constant(name: str) -> object:
    """json's ``parse_constant``: NaN and Infinity are not JSON (Python's json takes them),
    and a number that is not one must not reach a snapshot, a report or a cache."""
    raise ValueError("%s is not a JSON number" % name)


class NotRegular(OSError):
    """A FIFO, socket, device or directory where a regular file was expected."""


def open_regular(path: str) -> int:
    """An fd for ``path`` if it is a regular file; never blocks on a FIFO or a device."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(0, "not a regular file", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str, cap: int) -> bytes:
    """At most ``cap`` bytes of a regular file; OSError (incl. NotRegular, EFBIG) otherwise."""
    fd = open_regular(path)
    try:
        return read_open(fd, cap, path)
    finally:
        os.close(fd)


def read_open(fd: int, cap: int, path: str) -> bytes:
    """All of an open file's bytes, at most ``cap`` (OSError EFBIG past it): for a caller
    that checks the open file (fstat) before it reads."""
    chunks = []
    total = 0
    while True:
        block = os.read(fd, min(1 << 20, cap + 1 - total))
        if not block:
            break
        chunks.append(block)
        total += len(block)
        if total > cap:
            raise OSError(27, "larger than %d bytes" % cap, path)  # EFBIG
    return b"".join(chunks)


def read_text(path: str, cap: int = SMALL_CAP) -> Optional[str]:
    """A small regular file as text (bad bytes replaced), or None when it cannot be read."""
    try:
        return read_bytes(path, cap).decode("utf-8", "replace")
    except OSError:
        return None


LOCKFILE_CAP = 64 << 20  # uv.lock of a large monorepo is a few MB; 64 MiB is not a lockfile
