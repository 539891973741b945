"""The probe's steady path without re: its import (with enum) is 8 ms of every probe's CPU,
so what the probe tells at every run it tells by string operations, each held here to the
one pattern it stands for, on the texts it meets and the ones that try to slip past."""

from __future__ import annotations

import re
import sys

from hypothesis import example, given, settings
from hypothesis import strategies as st

from envguard.reading import UNSAFE_CHARS
from envguard.redact import _words
from factories import load_target, steady_modules

script = load_target()


def test_every_unsafe_character_is_unprintable() -> None:
    """The fast paths pass a printable text as it is: none of UNSAFE_CHARS may be printable
    (nor a lone surrogate, which the host layer's pattern adds)."""
    unsafe = re.compile("[" + UNSAFE_CHARS + "\ud800-\udfff]")
    found = [chr(c) for c in range(0x110000) if unsafe.match(chr(c))]
    assert len(found) > 100
    assert not any(c.isprintable() for c in found)


_LIB_PIECES = ["lib", "nccl", "cudart", "so", ".", "1", "12", "+", "-", "_", "x", "\u0663",
               "\u00b2", "\n", "a.b", "so.1", "libcudnn_"]  # fmt: skip


@settings(max_examples=4000, deadline=None)
@example("libnccl.so.2")
@example("libcudnn_ops.so.9")
@example("libc10_cuda.so")
@example("libx.so.so")
@example("libx.so.1.so")
@example("libx.so.\u00b2")  # a superscript is a digit to str.isdigit, not to [0-9]
@example("libx.so\n")  # \Z takes no line end
@example("lib.so")  # no stem
@example("libx..so")  # an empty part
@example("libx.so.")
@example("libx.so..1")
@example("lixnccl.so")  # not "lib"
@given(st.lists(st.sampled_from(_LIB_PIECES), max_size=9).map("".join))
def test_library_names_are_told_as_the_pattern_tells_them(name: str) -> None:
    assert script.lib_name(name) == bool(re.match(script.LIB_NAME.pattern, name))


@settings(max_examples=2000, deadline=None)
@example("x" * 100)
@example("x" * 101)
@example("cu13\n")
@given(st.text(alphabet="aZ09_.-/ \n\u0663é", max_size=8))
def test_folder_names_are_told_as_the_pattern_tells_them(name: str) -> None:
    assert script.dir_name(name) == bool(re.match(r"\A[A-Za-z0-9_.-]{1,100}\Z", name))


_NVCC_PIECES = ["release ", "release", "12", ".", "8", ", V", ",V", " ", "V", "\n", "x",
                "\u0663", "Cuda compilation tools, "]  # fmt: skip


@settings(max_examples=4000, deadline=None)
@example("Cuda compilation tools, release 12.8, V12.8.93\n")
@example("release , V1 release 1, V2")
@example("release 1, V")
@given(st.lists(st.sampled_from(_NVCC_PIECES), max_size=10).map("".join))
def test_nvcc_versions_are_read_as_the_pattern_reads_them(text: str) -> None:
    match = re.search(r"release [0-9.]+, V([0-9.]+)", text)
    assert script.nvcc_release(text) == (match.group(1) if match else None)


@settings(max_examples=3000, deadline=None)
@example("9.0\n8.6\n")
@example("1234.0")
@example("\u0663.0")
@given(st.text(alphabet="0129.\n \u0663x", max_size=10))
def test_compute_capabilities_are_read_as_the_pattern_reads_them(output: str) -> None:
    expected = [
        v.strip() for v in output.splitlines() if re.match(r"^[0-9]{1,3}\.[0-9]{1,3}$", v.strip())
    ]
    assert script.capabilities(output) == expected


_DIGEST_PIECES = ["sha256:", "0123456789abcdef" * 4, "0123456789abcdef" * 2, "A", "g", " ",
                  "\n", "sha256", ":", "f"]  # fmt: skip


@settings(max_examples=2000, deadline=None)
@example("sha256:" + "0" * 64)
@example(" " + "a" * 64 + "\n")
@example("sha256:sha256:" + "0" * 64)
@given(st.lists(st.sampled_from(_DIGEST_PIECES), max_size=4).map("".join))
def test_image_digests_are_read_as_the_pattern_reads_them(value: str) -> None:
    match = re.match(r"\A(?:sha256:)?([0-9a-f]{64})\Z", value.strip())
    assert script.image_digest(value) == ("sha256:" + match.group(1) if match else None)


@settings(max_examples=3000, deadline=None)
@example("HF_TOKEN")
@example("--API-KEY")
@example("SGLANG_HF_TOK")
@example("STRASSE\u00df_KEY")  # not ASCII: told character by character
@given(st.text(alphabet="AZ09_-. a\u00dfÉ\u0663\u212a", max_size=12))
def test_secret_names_are_split_as_the_pattern_splits_them(name: str) -> None:
    upper = name.upper().lstrip("-")
    assert _words(upper) == [w for w in re.split(r"[^A-Z0-9]+", upper) if w]


_HEADER_PIECES = ["Name", "Version", "Requires-Dist", "Name-X", "name", ":", " ", "\t", "\r",
                  "\n", "x", "torch>=2", "; extra == 'a'", "\u2028", "\x85", "Summary"]  # fmt: skip


@settings(max_examples=4000, deadline=None)
@example("Name: torch\nVersion: 2.14.1\nRequires-Dist: filelock\r\n")
@example("Name:\t \r")
@example("Version: 1 \x85\n")  # NEL ends no line for the pattern
@given(st.lists(st.sampled_from(_HEADER_PIECES), max_size=12).map("".join))
def test_metadata_headers_are_read_as_the_pattern_reads_them(text: str) -> None:
    assert script.headers(text) == re.findall(script._HEADER, text)


def test_a_steady_probe_loads_no_re() -> None:
    """A warm probe of this interpreter (its caches kept) reads no module that imports re:
    each step that asks for a pattern at every run is one the fast paths above missed.
    (The field corpus holds the same of CUDA torch: tests/field/test_steady_probe.py.)"""
    modules = steady_modules(sys.executable)
    assert "re" not in modules and "json" not in modules, sorted(modules)
    # nor types, which the loader needs only for the classes of a module and of code
    assert "types" not in modules, sorted(modules)


def test_a_steady_probe_on_a_busy_machine_loads_no_threading() -> None:
    """With no core to spare, the check runs in a thread of the probe's own: _thread's, as
    the reads beside the shares do, not threading's (2 ms to import, functools and types
    with it). The steady probe above met it whenever the machine was busy."""
    busy = "_pkg.checking.spare_core = lambda: False\n"
    modules = steady_modules(sys.executable, before_main=busy)
    assert "threading" not in modules and "types" not in modules, sorted(modules)
