"""The fit check (probe/target/fit.py, symbols.py): real shared objects built with gcc, an
extension linked against one build of a "torch" library and then given another, the way pip
leaves a torchvision built for another torch."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from elflibs import EXT, c10, cc, extension, needs_gcc, torch_site
from factories import load_target, make_dist_info

script = load_target()
pytestmark = needs_gcc


def fit(site: Path, cache: Any = None) -> tuple[dict[str, Any], list[str]]:
    warnings: list[str] = []
    packages = script.scan_packages([str(site)], warnings)
    found = script.fit([str(site)], packages, None, {}, warnings, cache)
    return found, warnings


def test_an_extension_built_for_this_torch_fits(tmp_path: Path) -> None:
    site = tmp_path / "site"
    torch_site(site, "c10_a", "c10_b")
    extension(site, site / "torch" / "lib" / "libc10.so", "c10_a", "c10_b")
    found, warnings = fit(site)
    assert found == {"checked": 2, "broken": [], "archs": []}
    assert warnings == []


def test_a_venv_reached_through_a_symlink_is_checked_as_it_is(tmp_path: Path) -> None:
    """A symlinked .venv: its extensions' real paths lie under the link's target, and each
    is still checked (none left out as lying outside the venv), the same verdicts."""
    site = tmp_path / "site"
    torch_site(site, "c10_a")
    extension(site, site / "torch" / "lib" / "libc10.so", "c10_a", "c10_gone")
    linked = tmp_path / "venv-link"
    linked.symlink_to(site)
    direct, through = fit(site), fit(linked)
    assert through == direct
    assert through[0]["checked"] == 2 and len(through[0]["broken"]) == 1


def test_a_symbol_this_torch_lacks_and_a_missing_cuda_runtime_are_named(tmp_path: Path) -> None:
    site = tmp_path / "site"
    torch_site(site, "c10_a")
    other = c10(tmp_path / "other" / "libc10.so", "c10_a", "aoti_torch_get_current_cuda_stream")
    # Versioned as NVIDIA's is: each symbol at the version named as the library.
    cudart = cc(
        tmp_path / "cuda" / "libcudart.so.99",
        "int cudaX(void) { return 0; }\n",
        soname="libcudart.so.99",
        version_script="libcudart.so.99 { global: *; };\n",
    )
    extension(site, other, "c10_a", "aoti_torch_get_current_cuda_stream", "cudaX", link=(cudart,))
    shutil.rmtree(tmp_path / "cuda")
    found, warnings = fit(site)
    assert found["checked"] == 2
    (entry,) = found["broken"]
    assert entry["path"] == EXT and entry["dist"] == "vision 0.29.1"
    assert entry["missing"] == ["libcudart.so.99"]
    # cudaX@libcudart.so.99 is said once, as its library.
    assert entry["symbols"] == ["aoti_torch_get_current_cuda_stream"]
    assert entry["symbol_count"] == 1
    assert entry["symbols_from"] == "torch 2.13.0+cpu"
    assert warnings == []


def test_without_torch_loaded_first_its_libraries_are_not_found(tmp_path: Path) -> None:
    """No torch distribution: nothing loads libc10.so before the extension asks."""
    site = tmp_path / "site"
    lib = c10(tmp_path / "elsewhere" / "libc10.so", "c10_a")
    extension(site, lib, "c10_a")
    (entry,) = fit(site)[0]["broken"]
    assert entry["missing"] == ["libc10.so"] and entry["symbols_from"] is None


def test_a_version_the_library_no_longer_defines_is_named(tmp_path: Path) -> None:
    site = tmp_path / "site"
    torch_site(site, "c10_a", version="C10_2")
    old = c10(tmp_path / "old" / "libc10.so", "c10_a", version="C10_1")
    extension(site, old, "c10_a")
    (entry,) = fit(site)[0]["broken"]
    assert entry["versions"] == ["C10_1 (libc10.so)"]
    assert entry["symbols"] == ["c10_a@C10_1"]


def test_a_result_is_kept_under_the_stamps_and_read_again_when_one_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    torch_site(site, "c10_a")
    other = c10(tmp_path / "other" / "libc10.so", "c10_a", "c10_gone")
    extension(site, other, "c10_a", "c10_gone")
    folder = tmp_path / "cache"

    def cached() -> Any:
        return script.DistCache(str(folder), [str(site)], code="t", quiet=0.0)

    first = cached()
    found, _ = fit(site, first)
    first.save()
    assert found["broken"][0]["symbols"] == ["c10_gone"]
    # Warm: no symbol table is opened at all.
    real_symbols = script.Symbols
    monkeypatch.setitem(script.fit.__globals__, "Symbols", _refused)
    again, _ = fit(site, cached())
    assert again == found
    # The library torch loads changes: the kept result is not used.
    monkeypatch.setitem(script.fit.__globals__, "Symbols", real_symbols)
    c10(site / "torch" / "lib" / "libc10.so", "c10_a", "c10_gone")
    assert fit(site, cached())[0]["broken"] == []


def _refused(path: str) -> Any:
    raise AssertionError(f"{path} read although nothing changed")


def _linked(site: Path, rel: str, source: str, *link: Path) -> None:
    """``rel`` in site-packages, built from ``source`` against ``link``, in a RECORD."""
    cc(site / rel, source, link=link)
    name = rel.replace("/", "_").replace(".", "_")
    make_dist_info(site, name, "1.0", record=f"{rel},sha256=x,1\n")


def test_the_drivers_library_absent_here_is_not_the_venvs_to_answer(tmp_path: Path) -> None:
    """A build or CI machine has no libcuda.so.1: an extension that needs it (and calls
    cuInit) is not called broken for that; the driver is the node's."""
    site = tmp_path / "site"
    torch_site(site, "c10_a")
    driver = cc(
        tmp_path / "drv" / "libcuda.so.1",
        "int cuInit(int f) { return f; }\n",
        soname="libcuda.so.1",
    )
    _linked(
        site,
        "kern/ops.abi3.so",
        "int cuInit(int); int c10_a(void);\nint f(void) { return cuInit(0) + c10_a(); }\n",
        site / "torch" / "lib" / "libc10.so",
        driver,
    )
    shutil.rmtree(tmp_path / "drv")
    found, warnings = fit(site)
    assert found["checked"] == 2 and found["broken"] == [] and warnings == []


def test_a_library_no_import_loads_is_left_to_the_package_that_opens_it(tmp_path: Path) -> None:
    """torch-c-dlpack-ext ships an addon per torch release and opens the one that fits: a
    lib*.so without PyInit_ is not an import target; with one it is."""
    site = tmp_path / "site"
    torch_site(site, "c10_a")
    other = c10(tmp_path / "other" / "libc10.so", "c10_a", "c10_gone")
    calls = "int c10_gone(void);\nint f(void) { return c10_gone(); }\n"
    _linked(site, "addon/libaddon_torch24.so", calls, other)
    _linked(site, "mod/libmod.so", calls + "void PyInit_libmod(void) {}\n", other)
    found, _ = fit(site)
    assert [e["path"] for e in found["broken"]] == ["mod/libmod.so"]


def test_one_build_of_a_group_that_loads_is_enough(tmp_path: Path) -> None:
    """x_cu12.abi3.so and x_cu13.abi3.so: the package opens the build for the CUDA it finds;
    only a group with no build that loads is broken."""
    site = tmp_path / "site"
    torch_site(site, "c10_a")
    c10_lib = site / "torch" / "lib" / "libc10.so"
    runtime = cc(
        tmp_path / "rt" / "libcudart.so.12",
        "int cudaY(void) { return 0; }\n",
        soname="libcudart.so.12",
        version_script="libcudart.so.12 { global: *; };\n",
    )
    calls = "int c10_a(void);\nint f(void) { return c10_a(); }\n"
    _linked(site, "saver_cu12.abi3.so", calls, c10_lib, runtime)
    _linked(site, "saver_cu13.abi3.so", calls, c10_lib)
    _linked(site, "lone_cu12.abi3.so", calls, c10_lib, runtime)
    shutil.rmtree(tmp_path / "rt")
    found, _ = fit(site)
    assert [e["path"] for e in found["broken"]] == ["lone_cu12.abi3.so"]


_NAME_PIECES = ["_", "-", "cu", "cuda", "cpu", "rocm", "1", "12", "130", "1234", ".", "so", "x",
                "/", "\u0663", "\u00b2", ".5", "abi3", "lib"]  # fmt: skip


@settings(max_examples=3000, deadline=None)
@example("torch/lib/libtorch_cuda.so")
@example("x_rocm6.4.so")
@example("x-cu1234.so")
@example("x-rocm6.so")
@example("x_cu\u00b2\u00b2.so")  # superscripts are digits, not decimals: no tag
@given(st.lists(st.sampled_from(_NAME_PIECES), max_size=12).map("".join))
def test_build_tags_are_removed_as_the_pattern_removes_them(rel: str) -> None:
    """A file's group of builds (x_cu12.so, x_cu13.so and x.so are one) is told without re
    (its import is 8 ms of every probe of a torch venv), as the one pattern tells it."""
    assert script._variants(rel) == re.sub(script._BUILD_TAG.pattern, "", rel)
