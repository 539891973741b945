"""Shared libraries for the tests: real ones built with gcc, and hand-laid ELF bytes for the
shapes gcc will not make (32-bit big-endian, lying headers)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from factories import make_dist_info

GCC = shutil.which("gcc") or shutil.which("cc")
needs_gcc = pytest.mark.skipif(
    GCC is None, reason="no gcc: these tests build real ELF shared libraries with it"
)


def build_program(path: Path, log: Path, printed: str, *, code: int = 0) -> Path:
    """A real ELF program at ``path`` that appends a line to ``log`` each run, prints
    ``printed`` and exits ``code``: a tool whose starts a test counts (nvcc, g++)."""
    assert GCC is not None
    source = path.parent / (path.name.replace("+", "p") + ".c")
    text = printed.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    source.write_text(
        "#include <stdio.h>\n"
        "int main(void) {\n"
        f'  FILE *f = fopen("{log}", "a"); if (f) {{ fputs("run\\n", f); fclose(f); }}\n'
        f'  fputs("{text}", stdout); return {code};\n'
        "}\n"
    )
    subprocess.run([GCC, "-o", str(path), str(source)], check=True, capture_output=True)
    return path


# What nvcc --version prints (13.0), for a stand-in built by build_program.
NVCC = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"


def build_lib(
    out: Path,
    soname: str,
    *,
    text: str | None = None,
    needed: Sequence[Path] = (),
    rpath: str | None = None,
    runpath: str | None = None,
) -> Path:
    """A real shared library named ``soname``, carrying ``text`` as a string in .rodata
    (as NCCL carries "NCCL version 2.21.5+cuda12.4"), linked against ``needed``."""
    assert GCC is not None
    out.parent.mkdir(parents=True, exist_ok=True)
    source = out.parent / (out.name + ".c")
    quoted = (text or "").replace("\\", "\\\\").replace('"', '\\"')
    source.write_text(
        f'__attribute__((used)) const char envguard_test_text[] = "{quoted}";\n'
        "int envguard_test_function(void) { return 1; }\n"
    )
    argv = [GCC, "-shared", "-fPIC", "-o", str(out), str(source), f"-Wl,-soname,{soname}"]
    argv.append("-Wl,--no-as-needed")
    for lib in needed:
        argv += [f"-L{lib.parent}", f"-l:{lib.name}"]
    if rpath is not None:
        argv += ["-Wl,--disable-new-dtags", f"-Wl,-rpath,{rpath}"]
    if runpath is not None:
        argv += ["-Wl,--enable-new-dtags", f"-Wl,-rpath,{runpath}"]
    subprocess.run(argv, check=True, capture_output=True)
    source.unlink()
    return out


def elf_bytes(
    *,
    wide: int = 2,
    end: str = "<",
    soname: str = "libx.so.1",
    needed: Sequence[str] = ("libc.so.6",),
    runpath: str | None = "/opt/r",
    phoff: int | None = None,
    phnum: int | None = None,
    dyn_entries: int | None = None,
    strtab_at: int | None = None,
) -> bytes:
    """A minimal ELF shared object laid out by hand: one PT_LOAD mapping the whole file at
    0x1000, one PT_DYNAMIC, a dynamic string table, no section headers. The keyword
    arguments past ``runpath`` make its headers lie."""
    strings = b"\0"
    offsets = {}
    for name in (soname, *needed, *([runpath] if runpath else [])):
        offsets[name] = len(strings)
        strings += name.encode() + b"\0"
    ehsize, phsize = (64, 56) if wide == 2 else (52, 32)
    str_off = 256
    dyn_off = (str_off + len(strings) + 15) // 16 * 16
    tags = [(14, offsets[soname])] + [(1, offsets[n]) for n in needed]
    if runpath:
        tags.append((29, offsets[runpath]))
    tags += [(5, 0x1000 + (str_off if strtab_at is None else strtab_at)), (10, len(strings))]
    tags.append((0, 0))
    if dyn_entries is not None:  # a dynamic section claiming far more entries than it has
        tags = [(99, 0)] * dyn_entries
    dyn_fmt = end + ("qQ" if wide == 2 else "iI")
    dynamic = b"".join(struct.pack(dyn_fmt, t, v) for t, v in tags)
    total = dyn_off + len(dynamic)
    if wide == 2:
        load = struct.pack(end + "IIQQQQQQ", 1, 5, 0, 0x1000, 0x1000, total, total, 0x1000)
        dyn = struct.pack(end + "IIQQQQQQ", 2, 6, dyn_off, 0x1000 + dyn_off, 0, len(dynamic), 0, 8)
    else:
        load = struct.pack(end + "IIIIIIII", 1, 0, 0x1000, 0x1000, total, total, 5, 0x1000)
        dyn = struct.pack(end + "IIIIIIII", 2, dyn_off, 0x1000 + dyn_off, 0, len(dynamic), 0, 6, 4)
    ident = b"\x7fELF" + bytes([wide, 1 if end == "<" else 2, 1]) + b"\0" * 9
    fields = (3, 62 if wide == 2 else 20, 1, 0)
    rest = (
        ehsize if phoff is None else phoff,
        0,
        0,
        ehsize,
        phsize,
        2 if phnum is None else phnum,
        64 if wide == 2 else 40,
        0,
        0,
    )
    header = ident + struct.pack(
        end + ("HHIQQQIHHHHHH" if wide == 2 else "HHIIIIIHHHHHH"), *fields, *rest
    )
    out = bytearray(total)
    out[: len(header)] = header
    out[ehsize : ehsize + 2 * phsize] = load + dyn
    out[str_off : str_off + len(strings)] = strings
    out[dyn_off:total] = dynamic
    return bytes(out)


# ---- a site-packages of extensions built against one torch and given another ------------

EXT = "vision/_C.so"
TORCH_C = "torch/_C.cpython-311-x86_64-linux-gnu.so"


def cc(
    out: Path,
    source: str,
    *,
    soname: str | None = None,
    link: tuple[Path, ...] = (),
    runpath: str | None = None,
    version_script: str | None = None,
) -> Path:
    """A shared object of C ``source``, linked against ``link`` (by file name)."""
    assert GCC is not None
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / (out.name + ".c")
    src.write_text(source)
    argv = [GCC, "-shared", "-fPIC", "-o", str(out), str(src), "-Wl,--no-as-needed"]
    if soname:
        argv.append(f"-Wl,-soname,{soname}")
    if version_script is not None:
        script_path = out.parent / (out.name + ".map")
        script_path.write_text(version_script)
        argv.append(f"-Wl,--version-script,{script_path}")
    for lib in link:
        argv += [f"-L{lib.parent}", f"-l:{lib.name}"]
    if runpath is not None:
        argv += ["-Wl,--enable-new-dtags", f"-Wl,-rpath,{runpath}"]
    subprocess.run(argv, check=True, capture_output=True)
    src.unlink()
    return out


def c10(out: Path, *names: str, version: str | None = None) -> Path:
    """A libc10.so defining ``names`` (at ``version`` when given)."""
    source = "".join(f"int {n}(void) {{ return 1; }}\n" for n in names)
    script_text = f"{version} {{ global: *; }};\n" if version else None
    return cc(out, source, soname="libc10.so", version_script=script_text)


def torch_site(site: Path, *names: str, version: str | None = None) -> None:
    """A torch: torch/lib/libc10.so and torch/_C, which finds it by RUNPATH."""
    lib = c10(site / "torch" / "lib" / "libc10.so", *names, version=version)
    calls = " + ".join(f"{n}()" for n in names[:1]) or "0"
    proto = "".join(f"int {n}(void);\n" for n in names[:1])
    cc(
        site / TORCH_C,
        proto + f"int torch_init(void) {{ return {calls}; }}\n",
        link=(lib,),
        runpath="$ORIGIN/lib",
    )
    make_dist_info(site, "torch", "2.13.0+cpu", record=f"{TORCH_C},sha256=x,1\n")


def extension(site: Path, built_against: Path, *calls: str, link: tuple[Path, ...] = ()) -> None:
    """vision/_C.so calling ``calls``, linked against ``built_against`` (no RUNPATH: it
    gets libc10.so from torch's import, as torchvision's extension does)."""
    proto = "".join(f"int {n}(void);\n" for n in calls)
    body = " + ".join(f"{n}()" for n in calls) or "0"
    cc(
        site / EXT,
        proto + f"int vision_init(void) {{ return {body}; }}\n",
        link=(built_against, *link),
    )
    make_dist_info(site, "vision", "0.29.1", record=f"{EXT},sha256=x,1\n")


# CUDA fat binaries (probe/target/fatbin.py): a .nv_fatbin section's bytes.
PTX, CUBIN = 1, 2


def entry(kind: int, arch: int, payload: int = 24, *, size: int | None = None) -> bytes:
    """One fatbin entry: a 64-byte header (kind, header size, payload size, arch at byte 28)
    and ``payload`` bytes; ``size`` overrides the payload size the header claims."""
    claimed = payload if size is None else size
    head = struct.pack(
        "<HHIQIIHHIIIQQQ", kind, 0x101, 64, claimed, 0, 0, 0, 0, arch, 0, 0, 0x11, 0, 0
    )
    return head + b"\xab" * payload


def fatbin(*entries: bytes, fat_size: int | None = None) -> bytes:
    body = b"".join(entries)
    claimed = len(body) if fat_size is None else fat_size
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, claimed) + body


def fatbin_extension(site: Path, blob: Path) -> None:
    """vision/_C.so, calling torch's c10_a, with ``blob`` as its .nv_fatbin section."""
    source = (
        "int c10_a(void);\nint vision_init(void) { return c10_a(); }\n"
        f'__asm__(".section .nv_fatbin,\\"a\\"\\n.incbin \\"{blob}\\"\\n.previous");\n'
    )
    cc(site / EXT, source, link=(site / "torch" / "lib" / "libc10.so",))
    if not (site / "vision-0.29.1.dist-info").exists():
        make_dist_info(site, "vision", "0.29.1", record=f"{EXT},sha256=x,1\n")
