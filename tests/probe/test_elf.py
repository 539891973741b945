"""The probe's ELF reader and version search (probe/target/elf.py, libs.py), on libraries
built by gcc and on hand-laid bytes whose headers lie."""

from __future__ import annotations

import os
import re
import struct
import time
from pathlib import Path

import pytest

from elflibs import build_lib, elf_bytes, needs_gcc
from factories import load_target

script = load_target()


@needs_gcc
def test_a_gcc_library_says_its_soname_needed_rpath_runpath_and_version(tmp_path: Path) -> None:
    dep = build_lib(tmp_path / "dep" / "libdep.so.3", "libdep.so.3")
    lib = build_lib(
        tmp_path / "libnccl.so.2",
        "libnccl.so.2",
        text="NCCL version 2.28.9+cuda12.9",
        needed=[dep],
        runpath="$ORIGIN/../lib:/opt/cuda/lib64",
    )
    elf = script.read_elf(str(lib))
    assert elf["soname"] == "libnccl.so.2"
    assert "libdep.so.3" in elf["needed"]
    assert elf["runpath"] == "$ORIGIN/../lib:/opt/cuda/lib64" and elf["rpath"] is None
    assert elf["rodata"] is not None
    assert script.Reader(None).version(str(lib)) == ("2.28.9+cuda12.9", "string")
    old_style = build_lib(tmp_path / "old.so", "libold.so.1", rpath="$ORIGIN")
    assert script.read_elf(str(old_style))["rpath"] == "$ORIGIN"


@needs_gcc
@pytest.mark.parametrize(
    ("name", "text", "version"),
    [
        ("libcudnn_graph.so.9", "cudnn_version_9_24_0_43_", "9.24.0.43"),
        ("libnvrtc.so.13", "Cuda compilation tools, release 13.0, V13.0.88", "13.0.88"),
        # A lying string: no version is read from it, rather than a wrong one.
        ("libnccl.so.2", "NCCL version 99999999999.1.1", None),
        ("libnccl.so.2", "NCCL version \x1b[31m2.30.7", None),
    ],
)
def test_the_version_each_library_carries(
    tmp_path: Path, name: str, text: str, version: str | None
) -> None:
    lib = build_lib(tmp_path / name, name, text=text)
    found, source = script.Reader(None).version(str(lib))
    if version is None:
        assert source != "string"
    else:
        assert (found, source) == (version, "string")


@needs_gcc
def test_cudnn_and_system_copies_and_sonames_give_what_they_can(tmp_path: Path) -> None:
    build_lib(
        tmp_path / "libcudnn_graph.so.9", "libcudnn_graph.so.9", text="cudnn_version_9_1_0_70_"
    )
    cudnn = build_lib(tmp_path / "libcudnn.so.9", "libcudnn.so.9")
    system = build_lib(tmp_path / "libcudart.so.12.8.90", "libcudart.so.12")
    wheel = build_lib(tmp_path / "w" / "libcublas.so.13", "libcublas.so.13")
    reader = script.Reader(None)
    assert reader.version(str(cudnn)) == ("9.1.0.70", "string")
    assert reader.version(str(system)) == ("12.8.90", "file name")
    assert reader.version(str(wheel)) == ("13", "soname")


def test_a_32_bit_big_endian_library_is_read(tmp_path: Path) -> None:
    lib = tmp_path / "libx.so.1"
    lib.write_bytes(elf_bytes(wide=1, end=">", needed=("liby.so.2", "libc.so.6")))
    elf = script.read_elf(str(lib))
    assert (elf["soname"], elf["needed"], elf["runpath"]) == (
        "libx.so.1",
        ["liby.so.2", "libc.so.6"],
        "/opt/r",
    )
    assert elf["machine"] == "32/20"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\x7fELF\x02\x01\x01" + b"\0" * 20, "past the end"),  # truncated header
        (elf_bytes()[:200], "past the end"),  # the dynamic section cut off
        (elf_bytes(phoff=1 << 40), "past the end"),
        (elf_bytes(phnum=60000), "implausible"),
        (elf_bytes(dyn_entries=9000), "more than"),
        (elf_bytes(strtab_at=1 << 20), "outside"),
        (b"\x7fELF\x07\x01" + b"\0" * 100, "unknown ELF class"),
        (b"#!/bin/sh\n" * 10, "not an ELF"),
    ],
)
def test_a_lying_header_is_an_elf_error_and_reads_little(
    tmp_path: Path, data: bytes, problem: str
) -> None:
    lib = tmp_path / "libnccl.so.2"
    lib.write_bytes(data)
    with pytest.raises(script.ElfError, match=problem):
        script.read_elf(str(lib))


def test_a_fifo_or_a_device_is_refused_without_a_read(tmp_path: Path) -> None:
    fifo = tmp_path / "libnccl.so.2"
    os.mkfifo(fifo)
    start = time.monotonic()
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(OSError, match="not a regular file"):
            script.read_elf(str(path))
    assert time.monotonic() - start < 1  # never blocked on the FIFO


def test_the_search_reads_in_overlapping_chunks_and_stops_at_its_cap(tmp_path: Path) -> None:
    big = tmp_path / "big"
    marker = b"NCCL version 2.21.5"
    # The marker straddles the first 1 MiB boundary; a second lies past the cap.
    data = bytearray(3 << 20)
    data[(1 << 20) - 5 : (1 << 20) - 5 + len(marker)] = marker
    big.write_bytes(bytes(data))
    pattern = re.compile(rb"NCCL version (\d+\.\d+\.\d+)")
    found = script.search_range(str(big), (0, len(data)), pattern, 64 << 20)
    assert found is not None and found.group(1) == b"2.21.5"
    assert script.search_range(str(big), (0, len(data)), pattern, 1 << 19) is None


def test_ld_so_cache_is_read_in_both_byte_orders_and_garbage_is_empty(tmp_path: Path) -> None:
    def cache(end: str) -> bytes:
        strings = b"libnccl.so.2\0/usr/lib/x86_64-linux-gnu/libnccl.so.2\0"
        entries = 1
        head = b"glibc-ld.so.cache1.1" + struct.pack(end + "IIB3xI12x", entries, len(strings), 2, 0)
        base = len(head) + 24 * entries
        entry = struct.pack(end + "iIIIQ", 0x0303, base, base + 13, 0, 0)
        return head + entry + strings

    for end in ("<", ">"):
        (tmp_path / "c").write_bytes(cache(end))
        found = script.LdCache(str(tmp_path / "c"))
        assert found.get("libnccl.so.2") == ["/usr/lib/x86_64-linux-gnu/libnccl.so.2"]
        assert found.get("libnccl.so") == []
    (tmp_path / "c").write_bytes(cache("<")[:60])
    assert script.LdCache(str(tmp_path / "c")).get("libnccl.so.2") == []
    (tmp_path / "c").write_bytes(b"glibc-ld.so.cache1.1" + b"\xff" * 200)
    assert script.LdCache(str(tmp_path / "c")).get("libnccl.so.2") == []
    if os.path.exists("/etc/ld.so.cache"):
        assert script.LdCache().get("libc.so.6")
