"""The GPU archs an extension carries: the entries of the CUDA fat binaries in its
``.nv_fatbin`` section, read from their headers alone.

The section holds fat binaries one after another (zero bytes may align each). Each starts
with a 16-byte header: magic 0xBA55ED50, version, header size, and the size of the entries
that follow. Each entry has its own header: kind (1: PTX, 2: an ELF cubin), header size,
payload size, and at byte 28 the sm arch (75 for sm_75, 120 for sm_120). The layout is
NVIDIA's, undocumented, and what cuobjdump reads; entries are checked against it, never
trusted.

Only headers are read (a payload, compressed or not, is skipped by its size), each with a
positioned, bounded read; a size that points past its fat binary or past the section, a
count past the caps, an unknown kind: an ElfError, which the caller turns into a warning
naming the file. Nothing here follows a size out of the section.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import struct

from .elf import ElfError, find_section, read_exact
from .reading import open_regular

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Set

_MAGIC = 0xBA55ED50
_PTX, _CUBIN = 1, 2
# Fat binaries and entries read per file: a large extension (flash-attn) has a few thousand.
_MAX_FATBINS = 65536
_MAX_ENTRIES = 200000
# An entry's header: 64 to 112 bytes in real files; the arch lies at byte 28.
_MIN_ENTRY_HEADER = 32
_MAX_ENTRY_HEADER = 4096
# Zero bytes read past between two fat binaries (real ones: up to 7, to align the next).
_MAX_PADDING = 256
# sm_10 to sm_999: an arch outside is a header that lies.
_MIN_ARCH, _MAX_ARCH = 10, 999


def gpu_archs(path: str) -> Optional[Dict[str, List[int]]]:
    """{"cubins": the sm archs with a cubin, "ptx": those with PTX}, sorted, of the ELF at
    ``path``; None where it has no ``.nv_fatbin`` section. ElfError or OSError."""
    fd = open_regular(path)
    try:
        length = os.fstat(fd).st_size
        where = find_section(fd, length, b".nv_fatbin")
        if where is None:
            return None
        return read_fatbins(fd, where[0], where[0] + where[1], length)
    finally:
        os.close(fd)


def read_fatbins(fd: int, start: int, end: int, length: int) -> Dict[str, List[int]]:
    """The archs of the fat binaries in bytes [start, end) of ``fd`` (``length`` bytes)."""
    cubins: Set[int] = set()
    ptx: Set[int] = set()
    pos = start
    fatbins = entries = 0
    padding = False
    while pos + 16 <= end:
        magic, _, header_size, fat_size = struct.unpack("<IHHQ", read_exact(fd, 16, pos, length))
        if magic != _MAGIC:
            # Zero bytes align the next fat binary; a run of them is read past once.
            chunk = b"" if padding else os.pread(fd, min(_MAX_PADDING, end - pos), pos)
            zeros = len(chunk) - len(chunk.lstrip(b"\0"))
            if not zeros:
                raise ElfError("a fat binary in .nv_fatbin has no magic")
            pos += zeros
            padding = True
            continue
        fatbins += 1
        padding = False
        if fatbins > _MAX_FATBINS:
            raise ElfError("more than %d fat binaries" % _MAX_FATBINS)
        entry = pos + header_size
        stop = entry + fat_size
        if header_size < 16 or stop > end:
            raise ElfError("a fat binary's sizes run past its section")
        while entry < stop:
            entries += 1
            if entries > _MAX_ENTRIES:
                raise ElfError("more than %d fat binary entries" % _MAX_ENTRIES)
            if entry + _MIN_ENTRY_HEADER > stop:
                raise ElfError("a fat binary entry is cut short")
            head = read_exact(fd, _MIN_ENTRY_HEADER, entry, length)
            kind, _, size_of_header, size = struct.unpack_from("<HHIQ", head)
            (arch,) = struct.unpack_from("<I", head, 28)
            if kind not in (_PTX, _CUBIN):
                raise ElfError("a fat binary entry of unknown kind %d" % kind)
            if not _MIN_ENTRY_HEADER <= size_of_header <= _MAX_ENTRY_HEADER:
                raise ElfError("a fat binary entry's header size is implausible")
            if not _MIN_ARCH <= arch <= _MAX_ARCH:
                raise ElfError("a fat binary entry's arch is implausible")
            if entry + size_of_header + size > stop:
                raise ElfError("a fat binary entry's size runs past its fat binary")
            (ptx if kind == _PTX else cubins).add(arch)
            entry += size_of_header + size
        pos = stop
    return {"cubins": sorted(cubins), "ptx": sorted(ptx)}
