"""A minimal ELF reader: a shared library's SONAME, DT_NEEDED, DT_RPATH and DT_RUNPATH, and
where its read-only data lies, without loading it.

Every read is positioned (``os.pread``) and bounded: the program and section header tables
and the dynamic section are read by their counts, each capped; a string is read where the
dynamic string table says it is, never the table whole (libtorch_cpu's runs to megabytes).
A header that lies (a count too large, an offset past the end of the file, an address no
segment maps) is an :class:`ElfError`, never another exception. The file is opened with
``open_regular``: a FIFO or a device named like a library is refused before a byte is read.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import struct

from .reading import UNSAFE_CHARS, Regex, open_regular

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

_MAGIC = b"\x7fELF"
_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NEEDED, _DT_STRTAB, _DT_STRSZ, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 1, 5, 10, 14, 15, 29
# Real libraries have a dozen program headers, forty sections and a few dozen dynamic
# entries; a count past these is a lying header.
_MAX_PHNUM = 512
_MAX_SHNUM = 4096
_MAX_DYN = 8192
_MAX_NEEDED = 256
_MAX_STRING = 4096
_MAX_SHSTRTAB = 1 << 20
_UNSAFE = Regex("[" + UNSAFE_CHARS + "]")


class ElfError(Exception):
    """Not a readable ELF shared library; the message says what is wrong."""


def read_exact(fd: int, size: int, offset: int, length: int) -> bytes:
    """Exactly ``size`` bytes at ``offset`` of a file of ``length`` bytes."""
    if offset < 0 or size < 0 or offset + size > length:
        raise ElfError("a header points past the end of the file")
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise ElfError("the file is shorter than it was")
    return data


def _string(fd: int, offset: int, end: int) -> str:
    """The NUL-terminated string at ``offset`` (before ``end``): one line of text."""
    data = os.pread(fd, min(_MAX_STRING, max(0, end - offset)), offset)
    nul = data.find(b"\0")
    if nul < 0:
        raise ElfError("a dynamic string runs past its table")
    text = data[:nul].decode("utf-8", "replace")
    if _UNSAFE.search(text):
        raise ElfError("a dynamic string holds control characters")
    return text


def read_elf(path: str) -> Dict[str, Any]:
    """{"machine", "soname", "needed", "rpath", "runpath", "rodata"} of the ELF at ``path``
    (``rodata``: (offset, size) of its .rodata section, or None); ElfError or OSError."""
    fd = open_regular(path)
    try:
        return _read(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def layout(fd: int, length: int) -> Dict[str, Any]:
    """The ELF header and program headers of the open file ``fd`` (``length`` bytes):
    {"wide": 1|2, "end": "<"|">", "header": the header's fields after e_ident, "loads":
    [(vaddr, filesz, offset)] of PT_LOAD, "dynamic": (offset, size) of PT_DYNAMIC or None,
    "sh_size", "dyn_fmt"}; ElfError for anything that is not one."""
    ident = read_exact(fd, 16, 0, length) if length >= 16 else b""
    if ident[:4] != _MAGIC:
        raise ElfError("not an ELF file")
    wide, order = ident[4], ident[5]
    if wide not in (1, 2) or order not in (1, 2):
        raise ElfError("unknown ELF class or byte order")
    end = "<" if order == 1 else ">"
    if wide == 2:
        header = struct.unpack(end + "HHIQQQIHHHHHH", read_exact(fd, 48, 16, length))
        ph_size, sh_size, dyn_fmt = 56, 64, end + "qQ"
    else:
        header = struct.unpack(end + "HHIIIIIHHHHHH", read_exact(fd, 36, 16, length))
        ph_size, sh_size, dyn_fmt = 32, 40, end + "iI"
    phoff, phentsize, phnum = header[4], header[8], header[9]
    if phnum > _MAX_PHNUM or (phnum and phentsize != ph_size):
        raise ElfError("implausible program header table")
    table = read_exact(fd, phnum * ph_size, phoff, length)
    loads: List[Tuple[int, int, int]] = []  # (vaddr, filesz, offset)
    dynamic: Optional[Tuple[int, int]] = None
    for i in range(phnum):
        entry = table[i * ph_size : (i + 1) * ph_size]
        if wide == 2:
            kind, _, offset, vaddr, _, filesz, _, _ = struct.unpack(end + "IIQQQQQQ", entry)
        else:
            kind, offset, vaddr, _, filesz, _, _, _ = struct.unpack(end + "IIIIIIII", entry)
        if kind == _PT_LOAD:
            loads.append((vaddr, filesz, offset))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, filesz)
    return {
        "wide": wide,
        "end": end,
        "header": header,
        "loads": loads,
        "dynamic": dynamic,
        "sh_size": sh_size,
        "dyn_fmt": dyn_fmt,
    }


def _read(fd: int, length: int) -> Dict[str, Any]:
    found = layout(fd, length)
    wide, end, header = found["wide"], found["end"], found["header"]
    loads, dynamic, sh_size, dyn_fmt = (
        found["loads"],
        found["dynamic"],
        found["sh_size"],
        found["dyn_fmt"],
    )
    _, machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, shstrndx = header
    out: Dict[str, Any] = {
        "machine": "%d/%d" % (wide * 32, machine),
        "soname": None,
        "needed": [],
        "rpath": None,
        "runpath": None,
        "rodata": _rodata(fd, length, shoff, shnum, shentsize, shstrndx, wide, end, sh_size),
    }
    if dynamic is None:
        return out  # a static object: nothing to look up
    entry_size = struct.calcsize(dyn_fmt)
    count = min(dynamic[1] // entry_size, _MAX_DYN)
    raw = read_exact(fd, count * entry_size, dynamic[0], length)
    tags: List[Tuple[int, int]] = []
    for i in range(count):
        tag, value = struct.unpack_from(dyn_fmt, raw, i * entry_size)
        if tag == 0:
            break
        tags.append((tag, value))
    else:
        if count == _MAX_DYN:
            raise ElfError("the dynamic section has more than %d entries" % _MAX_DYN)
    strtab = next((v for t, v in tags if t == _DT_STRTAB), None)
    strsz = next((v for t, v in tags if t == _DT_STRSZ), None)
    if strtab is None or strsz is None:
        return out
    base = next((o + strtab - va for va, size, o in loads if va <= strtab < va + size), None)
    if base is None or base + strsz > length:
        raise ElfError("the dynamic string table lies outside the file")
    for tag, value in tags:
        if tag not in (_DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH):
            continue
        if value >= strsz:
            raise ElfError("a dynamic string lies outside its table")
        text = _string(fd, base + value, base + strsz)
        if tag == _DT_NEEDED:
            if len(out["needed"]) >= _MAX_NEEDED:
                raise ElfError("more than %d needed libraries" % _MAX_NEEDED)
            out["needed"].append(text)
        else:
            out[{_DT_SONAME: "soname", _DT_RPATH: "rpath", _DT_RUNPATH: "runpath"}[tag]] = text
    return out


def _rodata(
    fd: int,
    length: int,
    shoff: int,
    shnum: int,
    shentsize: int,
    shstrndx: int,
    wide: int,
    end: str,
    sh_size: int,
) -> Optional[Tuple[int, int]]:
    """(offset, size) of the .rodata section, or None (no section headers: a stripped
    or damaged table is not an error, the version is then unknown)."""
    table = (shoff, shnum, shentsize, shstrndx)
    return _section(fd, length, table, wide=wide, end=end, sh_size=sh_size, name=b".rodata")


def find_section(fd: int, length: int, name: bytes) -> Optional[Tuple[int, int]]:
    """(offset, size) of the section ``name`` of the open ELF file ``fd`` (``length``
    bytes), inside the file; None where it has none or no readable section table."""
    found = layout(fd, length)
    header = found["header"]
    table = (header[5], header[11], header[10], header[12])
    return _section(
        fd, length, table, wide=found["wide"], end=found["end"], sh_size=found["sh_size"], name=name
    )


def _section(
    fd: int,
    length: int,
    table: Tuple[int, int, int, int],
    *,
    wide: int,
    end: str,
    sh_size: int,
    name: bytes,
) -> Optional[Tuple[int, int]]:
    """(offset, size) of the section ``name``; ``table``: (shoff, shnum, shentsize,
    shstrndx) from the ELF header."""
    shoff, shnum, shentsize, shstrndx = table
    if not shnum or shentsize != sh_size or shnum > _MAX_SHNUM or shstrndx >= shnum:
        return None
    try:
        raw = read_exact(fd, shnum * sh_size, shoff, length)
    except ElfError:
        return None
    fmt = end + ("IIQQQQIIQQ" if wide == 2 else "IIIIIIIIII")
    sections = [struct.unpack_from(fmt, raw, i * sh_size) for i in range(shnum)]
    names = sections[shstrndx]
    if names[5] > _MAX_SHSTRTAB:
        return None
    try:
        strings = read_exact(fd, names[5], names[4], length)
    except ElfError:
        return None
    wanted = name + b"\0"
    for at, _, _, _, offset, size, _, _, _, _ in sections:
        if strings[at : at + len(wanted)] == wanted and offset + size <= length:
            return (offset, size)
    return None


def search_range(path: str, where: Tuple[int, int], pattern: Any, cap: int) -> Optional[Any]:
    """The first match of ``pattern`` (a bytes regex) in the ``where`` (offset, size) range of
    ``path``, read in 1 MiB chunks that overlap by 256 bytes, at most ``cap`` bytes."""
    offset, size = where
    size = min(size, cap)
    step, overlap = 1 << 20, 256
    fd = open_regular(path)
    try:
        done = 0
        while done < size:
            chunk = os.pread(fd, min(step + overlap, size - done), offset + done)
            if not chunk:
                return None
            found = pattern.search(chunk)
            if found is not None:
                return found
            done += step
    finally:
        os.close(fd)
    return None
