"""The GPU archs of a fatbin (probe/target/fatbin.py): a small ``.nv_fatbin`` section built
here, in an ELF file written by hand and in an extension gcc links; then sections that lie.
Real fatbins are read in tests/field/test_fit.py."""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

import pytest

from elflibs import CUBIN, EXT, PTX, entry, fatbin, fatbin_extension, needs_gcc, torch_site
from factories import load_target

script = load_target()


def elf_with(section: bytes, name: bytes = b".nv_fatbin") -> bytes:
    """A 64-bit little-endian ELF with no program headers and three sections: the null one,
    the section names, and ``section`` under ``name``."""
    names = b"\0.shstrtab\0" + name + b"\0"
    names_at = 64
    data_at = names_at + len(names)
    shoff = data_at + len(section)
    shoff += -shoff % 8
    header = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 56, 0, 64, 3, 1)
    blob = header + names + section
    blob += b"\0" * (shoff - len(blob))
    row = "<IIQQQQIIQQ"
    blob += struct.pack(row, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    blob += struct.pack(row, 1, 3, 0, 0, names_at, len(names), 0, 0, 1, 0)
    blob += struct.pack(row, 11, 1, 2, 0, data_at, len(section), 0, 0, 8, 0)
    return blob


def archs(tmp_path: Path, section: bytes) -> Any:
    path = tmp_path / "x.so"
    path.write_bytes(elf_with(section))
    return script.gpu_archs(str(path))


def test_cubins_and_ptx_of_every_fat_binary_are_read(tmp_path: Path) -> None:
    first = fatbin(entry(CUBIN, 75), entry(CUBIN, 80), entry(PTX, 80, 13))
    second = fatbin(entry(CUBIN, 86), entry(CUBIN, 120))
    padding = b"\0" * (-len(first) % 8)
    found = archs(tmp_path, first + padding + second)
    assert found == {"cubins": [75, 80, 86, 120], "ptx": [80]}


def test_no_fatbin_section_is_none(tmp_path: Path) -> None:
    path = tmp_path / "x.so"
    path.write_bytes(elf_with(b"hello", name=b".rodata"))
    assert script.gpu_archs(str(path)) is None


@pytest.mark.parametrize(
    ("section", "says"),
    [
        (fatbin(entry(CUBIN, 80), fat_size=1 << 60), "past its section"),
        (fatbin(entry(CUBIN, 80, size=1 << 62)), "past its fat binary"),
        (fatbin(entry(CUBIN, 80))[:-30], "past its section"),
        (fatbin(entry(7, 80)), "unknown kind"),
        (fatbin(entry(CUBIN, 0xFFFFFFFF)), "arch is implausible"),
        (b"\0" * 4096, "no magic"),
        (b"\x50\xed\x55\xbb" + b"\0" * 60, "no magic"),
    ],
)
def test_a_section_that_lies_is_an_elf_error(tmp_path: Path, section: bytes, says: str) -> None:
    with pytest.raises(script.ElfError, match=says):
        archs(tmp_path, section)


def test_huge_counts_stop_at_the_caps(tmp_path: Path) -> None:
    # 70,000 empty fat binaries: more than the cap, each 16 bytes.
    section = fatbin() * 70000
    started = time.monotonic()
    with pytest.raises(script.ElfError, match="more than 65536 fat binaries"):
        archs(tmp_path, section)
    assert time.monotonic() - started < 5


def test_a_zero_size_entry_loop_is_bounded(tmp_path: Path) -> None:
    # An entry claiming a header of 32 bytes and no payload, over and over.
    tiny = struct.pack("<HHIQ", CUBIN, 0x101, 32, 0) + struct.pack("<III", 0, 0, 0) + b"\0" * 0
    tiny = tiny[:28] + struct.pack("<I", 80)
    section = fatbin(*([tiny] * 210000))
    with pytest.raises(script.ElfError, match="more than 200000 fat binary entries"):
        archs(tmp_path, section)


@needs_gcc
def test_the_fit_records_an_extensions_archs_and_warns_on_a_lying_one(tmp_path: Path) -> None:
    site = tmp_path / "site"
    torch_site(site, "c10_a")
    blob = tmp_path / "fatbin.bin"
    blob.write_bytes(fatbin(entry(CUBIN, 75), entry(CUBIN, 86), entry(PTX, 86)))
    fatbin_extension(site, blob)
    warnings: list[str] = []
    packages = script.scan_packages([str(site)], warnings)
    found = script.fit([str(site)], packages, None, {}, warnings, None)
    assert found["broken"] == [] and warnings == []
    assert found["archs"] == [
        {"path": EXT, "dist": "vision 0.29.1", "cubins": [75, 86], "ptx": [86]}
    ]
    # The same section, its entry claiming more than the fat binary holds.
    blob.write_bytes(fatbin(entry(CUBIN, 75, size=1 << 40)))
    fatbin_extension(site, blob)
    warnings = []
    found = script.fit([str(site)], packages, None, {}, warnings, None)
    assert found["archs"] == []
    (warning,) = warnings
    assert warning.startswith(f"{EXT}: its fatbin cannot be read (")
    assert "its GPU archs not checked" in warning


def test_random_bytes_end_in_archs_or_an_elf_error(tmp_path: Path) -> None:
    import random

    rng = random.Random(35)
    good = fatbin(entry(CUBIN, 75), entry(PTX, 80)) + fatbin(entry(CUBIN, 90))
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            found = archs(tmp_path, bytes(data))
        except script.ElfError:
            continue
        assert set(found) == {"cubins", "ptx"}


@needs_gcc
def test_archs_are_kept_under_the_files_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    torch_site(site, "c10_a")
    blob = tmp_path / "fatbin.bin"
    blob.write_bytes(fatbin(entry(CUBIN, 90)))
    fatbin_extension(site, blob)
    folder = tmp_path / "cache"

    def fit() -> Any:
        cache = script.DistCache(str(folder), [str(site)], code="t", quiet=0.0)
        warnings: list[str] = []
        packages = script.scan_packages([str(site)], warnings, cache)
        found = script.fit([str(site)], packages, None, {}, warnings, cache)
        cache.save()
        return found["archs"]

    assert [a["cubins"] for a in fit()] == [[90]]
    real = script.gpu_archs

    def refused(path: str) -> Any:
        raise AssertionError(f"{path} read although nothing changed")

    monkeypatch.setitem(script.fit.__globals__, "gpu_archs", refused)
    assert [a["cubins"] for a in fit()] == [[90]]
    # The extension rebuilt: read again.
    monkeypatch.setitem(script.fit.__globals__, "gpu_archs", real)
    blob.write_bytes(fatbin(entry(CUBIN, 100)))
    fatbin_extension(site, blob)
    assert [a["cubins"] for a in fit()] == [[100]]
