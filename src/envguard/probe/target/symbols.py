"""An ELF object's dynamic symbols as the loader sees them: what it takes from others
(undefined symbols, with the version each needs, from .dynsym, .gnu.version and
.gnu.version_r) and whether it exports a name (at a version, from .gnu.version_d), without
loading it.

An export is looked up as ld.so looks it up: through the object's GNU hash table (its
bloom filter, bucket and chain), else its SysV hash table, reading only the chain entries,
symbols and names a lookup reaches (libtorch_cpu's symbol table runs to hundreds of
thousands of entries and its string table to tens of megabytes: never read whole). The
undefined symbols of an extension are read whole, each table capped. Every read is
positioned and bounded (elf.py's ``read_exact``); a header that lies (a count too large, an
offset past the end, a chain with no end) is an ElfError, never another exception or a hang.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import struct

from .elf import ElfError, layout, read_exact
from .reading import open_regular

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Set, Tuple

_DT_HASH, _DT_STRTAB, _DT_SYMTAB, _DT_STRSZ, _DT_SYMENT = 4, 5, 6, 10, 11
_DT_GNU_HASH = 0x6FFFFEF5
_DT_VERSYM, _DT_VERDEF, _DT_VERDEFNUM = 0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFD
_DT_VERNEED, _DT_VERNEEDNUM = 0x6FFFFFFE, 0x6FFFFFFF
_SHT_DYNSYM = 11
_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 1, 2, 10
_VER_FLG_WEAK = 2
_HIDDEN = 0x8000
_MAX_SHNUM = 4096
_MAX_DYN = 8192
# An extension's own tables, read whole: a real one has a few thousand symbols (flash-attn's
# CUDA extension some tens of thousands); past these the file is refused, not read.
MAX_SYMBOLS = 1 << 20
_MAX_STRTAB = 64 << 20
# Version needs and definitions: a few dozen in real objects.
_MAX_VERSIONS = 4096
# A hash table's header arrays, read whole once per library.
_MAX_BUCKETS = 1 << 22
# Chain entries one lookup may walk: a chain with no end bit is a lying table.
_MAX_CHAIN = 1 << 16
# Reads one object's lookups may make in all (chain entries, symbols, names): a table whose
# chains are all one (every name hashed alike) is refused, not walked for minutes.
_MAX_READS = 1 << 20
_MAX_NAME = 4096


def gnu_hash(name: bytes) -> int:
    """The GNU hash of a symbol name (dl-hash.h's ``dl_new_hash``)."""
    h = 5381
    for c in name:
        h = (h * 33 + c) & 0xFFFFFFFF
    return h


def sysv_hash(name: bytes) -> int:
    """The SysV ELF hash of a symbol name."""
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


class Symbols:
    """One ELF object opened for its dynamic symbols; ``close()`` when done."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.reads = 0
        self._gnu: Optional[Tuple[int, int, int, int, List[int], List[int], int]] = None
        self.fd = open_regular(path)
        try:
            self.length = os.fstat(self.fd).st_size
            self._headers()
        except BaseException:
            os.close(self.fd)
            raise

    def close(self) -> None:
        os.close(self.fd)

    def _read(self, size: int, offset: int) -> bytes:
        self.reads += 1
        if self.reads > _MAX_READS:
            raise ElfError("more than %d reads to look its symbols up" % _MAX_READS)
        return read_exact(self.fd, size, offset, self.length)

    def _headers(self) -> None:
        found = layout(self.fd, self.length)
        self.wide, self.end = wide, end = found["wide"], found["end"]
        if wide == 2:
            self.sym_fmt, self.sym_size = end + "IBBHQQ", 24
        else:
            self.sym_fmt, self.sym_size = end + "IIIBBH", 16
        header, sh_size, dyn_fmt = found["header"], found["sh_size"], found["dyn_fmt"]
        shoff, shentsize, shnum = header[5], header[10], header[11]
        self.loads: List[Tuple[int, int, int]] = found["loads"]
        dynamic = found["dynamic"]
        self.tags: Dict[int, int] = {}
        if dynamic is not None:
            entry_size = struct.calcsize(dyn_fmt)
            count = min(dynamic[1] // entry_size, _MAX_DYN)
            raw = self._read(count * entry_size, dynamic[0])
            for i in range(count):
                tag, value = struct.unpack_from(dyn_fmt, raw, i * entry_size)
                if tag == 0:
                    break
                self.tags.setdefault(tag, value)
        syment = self.tags.get(_DT_SYMENT, self.sym_size)
        if _DT_SYMTAB in self.tags and syment != self.sym_size:
            raise ElfError("a symbol entry of %d bytes" % syment)
        self.strtab = self._where(_DT_STRTAB)
        self.strsz = self.tags.get(_DT_STRSZ, 0)
        if self.strtab is not None and self.strtab + self.strsz > self.length:
            raise ElfError("the dynamic string table lies outside the file")
        self.symtab = self._where(_DT_SYMTAB)
        self.versym = self._where(_DT_VERSYM)
        self.count = self._dynsym_count(shoff, shnum, shentsize, sh_size)
        self.version_names = self._verdefs()

    def _where(self, tag: int) -> Optional[int]:
        """The file offset of the address a dynamic tag holds (None: no such tag)."""
        if tag not in self.tags:
            return None
        address = self.tags[tag]
        for vaddr, size, offset in self.loads:
            if vaddr <= address < vaddr + size:
                return offset + address - vaddr
        raise ElfError("a dynamic table lies where no segment maps")

    def _dynsym_count(self, shoff: int, shnum: int, shentsize: int, sh_size: int) -> int:
        """Entries in .dynsym: its section header's size, else the SysV hash table's chain
        count, else the GNU hash table's chains walked to their ends (0 when unknown)."""
        if shnum and shentsize == sh_size and shnum <= _MAX_SHNUM:
            try:
                table = self._read(shnum * sh_size, shoff)
            except ElfError:
                table = b""
            fmt = self.end + ("IIQQQQIIQQ" if self.wide == 2 else "IIIIIIIIII")
            for i in range(len(table) // sh_size):
                section = struct.unpack_from(fmt, table, i * sh_size)
                if section[1] == _SHT_DYNSYM and section[9] == self.sym_size:
                    return self._capped(section[5] // self.sym_size)
        hashed = self._where(_DT_HASH)
        if hashed is not None:
            return self._capped(struct.unpack(self.end + "II", self._read(8, hashed))[1])
        gnu = self._gnu_table()
        if gnu is None:
            return 0
        _, symoffset, _, _, _, buckets, chain = gnu
        last = max(buckets) if buckets else 0
        if last < symoffset:
            return symoffset
        for step in range(_MAX_CHAIN):
            if self._chain(chain, symoffset, last + step) & 1:
                return self._capped(last + step + 1)
        raise ElfError("a hash chain has no end")

    def _capped(self, count: int) -> int:
        if count > MAX_SYMBOLS:
            raise ElfError("more than %d dynamic symbols" % MAX_SYMBOLS)
        return count

    def _string(self, offset: int) -> bytes:
        if self.strtab is None or offset >= self.strsz:
            raise ElfError("a symbol name lies outside its table")
        start = self.strtab + offset
        data = os.pread(self.fd, min(_MAX_NAME, self.strsz - offset), start)
        nul = data.find(b"\0")
        if nul < 0:
            raise ElfError("a symbol name runs past its table")
        return data[:nul]

    def _verdefs(self) -> Dict[int, bytes]:
        """Version index -> name of the versions this object defines (.gnu.version_d)."""
        out: Dict[int, bytes] = {}
        at = self._where(_DT_VERDEF)
        if at is None:
            return out
        number = min(self.tags.get(_DT_VERDEFNUM, 0), _MAX_VERSIONS)
        for _ in range(number):
            _, _, index, count, _, aux, following = struct.unpack(
                self.end + "HHHHIII", self._read(20, at)
            )
            if count:
                name = struct.unpack(self.end + "I", self._read(4, at + aux))[0]
                out[index & 0x7FFF] = self._string(name)
            if not following:
                break
            at += following
        return out

    def needs(self) -> List[Tuple[bytes, List[Tuple[int, bytes, bool]]]]:
        """(file, [(version index, version name, weak)]) of each .gnu.version_r entry."""
        out: List[Tuple[bytes, List[Tuple[int, bytes, bool]]]] = []
        at = self._where(_DT_VERNEED)
        if at is None:
            return out
        total = 0
        for _ in range(min(self.tags.get(_DT_VERNEEDNUM, 0), _MAX_VERSIONS)):
            _, count, name, aux, following = struct.unpack(self.end + "HHIII", self._read(16, at))
            versions = []
            where = at + aux
            for _ in range(count):
                total += 1
                if total > _MAX_VERSIONS:
                    raise ElfError("more than %d version needs" % _MAX_VERSIONS)
                _, flags, index, vname, step = struct.unpack(
                    self.end + "IHHII", self._read(16, where)
                )
                versions.append((index & 0x7FFF, self._string(vname), bool(flags & _VER_FLG_WEAK)))
                if not step:
                    break
                where += step
            out.append((self._string(name), versions))
            if not following:
                break
            at += following
        return out

    def undefined(self) -> List[Tuple[bytes, Optional[bytes], Optional[bytes]]]:
        """(name, version, file the version is needed from) of each undefined symbol that is
        not weak: what the loader must find for the object to load (Python opens extensions
        with RTLD_NOW)."""
        if self.symtab is None or not self.count:
            return []
        if self.strsz > _MAX_STRTAB:
            raise ElfError("a dynamic string table of more than %d MiB" % (_MAX_STRTAB >> 20))
        table = self._read(self.count * self.sym_size, self.symtab)
        strings = self._read(self.strsz, self.strtab or 0)
        versions = self._versym_all()
        needed: Dict[int, Tuple[bytes, bytes]] = {}
        for file, listed in self.needs():
            for index, name, _ in listed:
                needed[index] = (name, file)
        out: List[Tuple[bytes, Optional[bytes], Optional[bytes]]] = []
        wide = self.wide == 2
        for i, fields in enumerate(struct.iter_unpack(self.sym_fmt, table)):
            if wide:
                name, info, _, shndx, _, _ = fields
            else:
                name, _, _, info, _, shndx = fields
            if i == 0 or shndx != 0 or info >> 4 != _STB_GLOBAL or not name:
                continue
            end = strings.find(b"\0", name)
            if name >= len(strings) or end < 0:
                raise ElfError("a symbol name lies outside its table")
            index = versions[i] & 0x7FFF if versions else 0
            need = needed.get(index)
            if need is None:
                out.append((strings[name:end], None, None))
            else:
                out.append((strings[name:end], need[0], need[1]))
        return out

    def _versym_all(self) -> List[int]:
        if self.versym is None:
            return []
        raw = self._read(self.count * 2, self.versym)
        return list(struct.unpack(self.end + "%dH" % self.count, raw))

    # ---- exports ---------------------------------------------------------------------

    def _gnu_table(self) -> Optional[Tuple[int, int, int, int, List[int], List[int], int]]:
        """(nbuckets, symoffset, bloom shift, bloom word bits, bloom, buckets, chain offset)."""
        if self._gnu is not None:
            return self._gnu
        at = self._where(_DT_GNU_HASH)
        if at is None:
            return None
        nbuckets, symoffset, bloom_size, shift = struct.unpack(
            self.end + "IIII", self._read(16, at)
        )
        if nbuckets == 0 or nbuckets > _MAX_BUCKETS or bloom_size > _MAX_BUCKETS:
            raise ElfError("implausible GNU hash table")
        word = 8 if self.wide == 2 else 4
        bloom = list(
            struct.unpack(
                self.end + "%d%s" % (bloom_size, "Q" if word == 8 else "I"),
                self._read(bloom_size * word, at + 16),
            )
        )
        start = at + 16 + bloom_size * word
        buckets = list(struct.unpack(self.end + "%dI" % nbuckets, self._read(nbuckets * 4, start)))
        chain = start + nbuckets * 4
        self._gnu = (nbuckets, symoffset, shift, word * 8, bloom, buckets, chain)
        return self._gnu

    def _chain(self, chain: int, symoffset: int, index: int) -> int:
        return int(struct.unpack(self.end + "I", self._read(4, chain + (index - symoffset) * 4))[0])

    def _symbol(self, index: int) -> Tuple[bytes, int, int]:
        """(name, binding, section index) of symbol ``index``."""
        if self.symtab is None:
            raise ElfError("no symbol table")
        fields = struct.unpack(
            self.sym_fmt, self._read(self.sym_size, self.symtab + index * self.sym_size)
        )
        if self.wide == 2:
            name, info, _, shndx, _, _ = fields
        else:
            name, _, _, info, _, shndx = fields
        return self._string(name), info >> 4, shndx

    def _matches(self, index: int, name: bytes, version: Optional[bytes]) -> bool:
        """Symbol ``index`` defines ``name`` in a way the reference (at ``version``) takes,
        as glibc's check_match() decides (do-lookup.h)."""
        found, binding, shndx = self._symbol(index)
        if found != name or shndx == 0:
            return False
        if binding not in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE):
            return False
        if self.versym is None:
            return True
        raw = struct.unpack(self.end + "H", self._read(2, self.versym + index * 2))[0]
        ndx = raw & 0x7FFF
        if version is None:
            return ndx < 3 or not raw & _HIDDEN
        if self.version_names.get(ndx) == version:
            return True
        return ndx < 2 and not raw & _HIDDEN

    def exports(self, name: bytes, version: Optional[bytes]) -> Optional[bool]:
        """Whether this object defines ``name`` (at ``version``) for others; None when it
        has no hash table to look in (then it is taken to, rather than alarm)."""
        gnu = self._gnu_table()
        if gnu is not None:
            nbuckets, symoffset, shift, bits, bloom, buckets, chain = gnu
            h = gnu_hash(name)
            if bloom:
                word = bloom[(h // bits) % len(bloom)]
                mask = (1 << (h % bits)) | (1 << ((h >> shift) % bits))
                if word & mask != mask:
                    return False
            index = buckets[h % nbuckets]
            if index < symoffset:
                return False
            for step in range(_MAX_CHAIN):
                value = self._chain(chain, symoffset, index + step)
                if (value | 1) == (h | 1) and self._matches(index + step, name, version):
                    return True
                if value & 1:
                    return False
            raise ElfError("a hash chain has no end")
        at = self._where(_DT_HASH)
        if at is None:
            return None
        nbucket, nchain = struct.unpack(self.end + "II", self._read(8, at))
        if not nbucket:
            return False
        h = sysv_hash(name)
        index = struct.unpack(self.end + "I", self._read(4, at + 8 + (h % nbucket) * 4))[0]
        chains = at + 8 + nbucket * 4
        for _ in range(min(nchain, _MAX_CHAIN)):
            if index == 0 or index >= nchain:
                return False
            if self._matches(index, name, version):
                return True
            index = struct.unpack(self.end + "I", self._read(4, chains + index * 4))[0]
        raise ElfError("a hash chain has no end")

    def defines(self) -> Set[bytes]:
        """The names of the versions this object defines."""
        return set(self.version_names.values())
