"""The fit check over hostile files: a truncated extension, a symbol table claiming millions
of entries, version needs and hash chains pointing out of bounds, random bytes. Each is a
warning naming the file (or a file simply read past), never a traceback or a hang."""

from __future__ import annotations

import random
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from elflibs import EXT, c10, extension, needs_gcc, torch_site
from factories import load_target

script = load_target()
pytestmark = needs_gcc

_SHT_DYNSYM = 11
_DT_VERNEED = 0x6FFFFFFE
_DT_GNU_HASH = 0x6FFFFEF5


def fit(site: Path) -> tuple[dict[str, Any], list[str]]:
    warnings: list[str] = []
    packages = script.scan_packages([str(site)], warnings)
    return script.fit([str(site)], packages, None, {}, warnings, None), warnings


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """torch with libc10.so, and vision/_C.so built against another libc10 (one symbol more)."""
    site = tmp_path / "site"
    torch_site(site, "c10_a")
    other = c10(tmp_path / "other" / "libc10.so", "c10_a", "c10_gone")
    extension(site, other, "c10_a", "c10_gone")
    return site


def _sections(data: bytes) -> list[tuple[int, int, int, int]]:
    """(header offset, type, file offset, size) of each section of a 64-bit ELF."""
    shoff, shentsize, shnum = (
        struct.unpack_from("<Q", data, 40)[0],
        *struct.unpack_from("<HH", data, 58),
    )
    out = []
    for i in range(shnum):
        at = shoff + i * shentsize
        kind = struct.unpack_from("<I", data, at + 4)[0]
        offset, size = struct.unpack_from("<QQ", data, at + 24)
        out.append((at, kind, offset, size))
    return out


def _dynamic_tag(data: bytearray, tag: int, value: int) -> None:
    """Set ``tag`` of the dynamic section of a 64-bit ELF to ``value``."""
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phnum = struct.unpack_from("<H", data, 56)[0]
    for i in range(phnum):
        kind, _, offset, _, _, size = struct.unpack_from("<IIQQQQ", data, phoff + i * 56)
        if kind == 2:
            for at in range(offset, offset + size, 16):
                if struct.unpack_from("<q", data, at)[0] == tag:
                    struct.pack_into("<Q", data, at + 8, value)
                    return
    raise AssertionError(f"no dynamic tag {tag:#x}")


def test_a_truncated_extension_is_a_warning_naming_it(site: Path) -> None:
    ext = site / EXT
    ext.write_bytes(ext.read_bytes()[:300])
    found, warnings = fit(site)
    assert found["broken"] == []
    assert any(w.startswith(EXT + ": ") and "fit not checked" in w for w in warnings), warnings


def test_a_symbol_table_claiming_millions_of_entries_is_refused_unread(site: Path) -> None:
    ext = site / EXT
    data = bytearray(ext.read_bytes())
    for at, kind, _, _ in _sections(bytes(data)):
        if kind == _SHT_DYNSYM:
            struct.pack_into("<Q", data, at + 32, 24 * 50_000_000)
    ext.write_bytes(bytes(data))
    started = time.monotonic()
    found, warnings = fit(site)
    assert time.monotonic() - started < 5
    assert found["broken"] == []
    assert any(EXT in w and "dynamic symbols" in w for w in warnings), warnings


def test_version_needs_out_of_bounds_are_a_warning(site: Path) -> None:
    ext = site / EXT
    data = bytearray(ext.read_bytes())
    _dynamic_tag(data, _DT_VERNEED, 0x7FFF_FFFF_0000)
    ext.write_bytes(bytes(data))
    found, warnings = fit(site)
    assert found["broken"] == []
    assert any(EXT in w for w in warnings), warnings


def test_a_library_whose_hash_table_lies_is_taken_to_export(site: Path) -> None:
    """torch's libc10.so with its GNU hash table moved out of the file: its exports cannot
    be looked up, which is said, and no symbol is blamed on it."""
    lib = site / "torch" / "lib" / "libc10.so"
    data = bytearray(lib.read_bytes())
    _dynamic_tag(data, _DT_GNU_HASH, 0x7FFF_FFFF_0000)
    lib.write_bytes(bytes(data))
    found, warnings = fit(site)
    assert all("c10_gone" not in e["symbols"] for e in found["broken"])
    assert any("torch/lib/libc10.so" in w for w in warnings), warnings


@pytest.mark.parametrize("victim", [EXT, "torch/lib/libc10.so"])
def test_random_bytes_end_in_an_answer_or_a_warning(site: Path, victim: str) -> None:
    path = site / victim
    original = path.read_bytes()
    rng = random.Random(35)
    started = time.monotonic()
    for _ in range(150):
        data = bytearray(original)
        for _ in range(rng.randint(1, 24)):
            at = rng.randrange(0, min(len(data), 8192))
            data[at] = rng.randrange(256)
        if rng.random() < 0.2:
            del data[rng.randrange(64, len(data)) :]
        path.write_bytes(bytes(data))
        found, _ = fit(site)
        assert set(found) == {"checked", "broken", "archs"}
    assert time.monotonic() - started < 60


def test_lookups_past_their_budget_are_a_warning_not_a_hang(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library whose chains are all one would make every lookup walk it: each object's
    reads are capped (here at 3), then it is taken to export, with a warning."""
    monkeypatch.setitem(script.Symbols.__init__.__globals__, "_MAX_READS", 3)
    found, warnings = fit(site)
    assert found["broken"] == []
    assert any("reads to look its symbols up" in w for w in warnings), warnings
