"""The GPU libraries of a site-packages folder (probe/target/libs.py): which distribution
claims each, the version inside it, the copy the loader gives torch; and a hostile folder
(a FIFO, a link to /dev/zero, a truncated or lying ELF) gives warnings, never a traceback."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from elflibs import build_lib, elf_bytes, needs_gcc
from factories import cache_file, load_target, make_dist_info, read_cache, write_cache

script = load_target()

NCCL = "nvidia/nccl/lib/libnccl.so.2"


def _dist(site: Path, name: str, version: str, *paths: str) -> None:
    rows = "".join(f"{p},sha256=x,1\n" for p in paths)
    make_dist_info(site, name, version, record=rows)


def scan(
    site: Path, environ: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    warnings: list[str] = []
    packages = script.scan_packages([str(site)], warnings)
    torch = script.torch_build(packages, warnings)
    libs = script.libraries([str(site)], packages, torch, environ or {}, warnings, None)
    return libs, warnings


@needs_gcc
def test_a_clobbered_library_names_the_distribution_its_bytes_contradict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    build_lib(site / NCCL, "libnccl.so.2", text="NCCL version 2.28.9+cuda12.9")
    _dist(site, "nvidia-nccl-cu12", "2.28.9", NCCL)
    _dist(site, "nvidia-nccl-cu13", "2.30.7", NCCL)
    (lib,), warnings = scan(site)
    assert lib["name"] == "libnccl.so.2" and lib["path"] == NCCL
    assert lib["soname"] == "libnccl.so.2"
    assert (lib["embedded_version"], lib["version_source"]) == ("2.28.9+cuda12.9", "string")
    assert (lib["dist"], lib["metadata_version"]) == ("nvidia-nccl-cu13", "2.30.7")
    assert lib["also_claimed_by"] == ["nvidia-nccl-cu12 2.28.9"]
    assert lib["loader_pick"] is None  # no torch: nothing loads it
    assert warnings == []


def test_hostile_library_files_are_warnings_naming_the_distribution(tmp_path: Path) -> None:
    site = tmp_path / "site"
    lib = site / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    os.mkfifo(lib / "libnccl.so.2")
    os.symlink("/dev/zero", lib / "libnccl-net.so")
    (lib / "libnccl.so.2.21.5").write_bytes(elf_bytes()[:100])
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    (site / "nvidia" / "cu13" / "lib" / "libcudart.so.13").write_bytes(elf_bytes(dyn_entries=9000))
    (site / "nvidia" / "cu13" / "lib" / "libcublas.so.13").write_bytes(elf_bytes(phoff=1 << 40))
    paths = [
        f"nvidia/nccl/lib/{n}" for n in ("libnccl.so.2", "libnccl-net.so", "libnccl.so.2.21.5")
    ]
    _dist(site, "nvidia-nccl-cu13", "2.30.7", *paths)
    _dist(site, "nvidia-cuda-runtime", "13.0.96", "nvidia/cu13/lib/libcudart.so.13")
    start = time.monotonic()
    libs, warnings = scan(site)
    assert time.monotonic() - start < 2
    by = {x["path"]: x for x in libs}
    assert "not a regular file" in by[NCCL]["error"]
    assert "link out of site-packages" in by["nvidia/nccl/lib/libnccl-net.so"]["error"]
    assert "past the end" in by["nvidia/nccl/lib/libnccl.so.2.21.5"]["error"]
    assert "more than" in by["nvidia/cu13/lib/libcudart.so.13"]["error"]
    assert by["nvidia/cu13/lib/libcublas.so.13"]["dist"] is None  # no RECORD claims it
    assert all(x["embedded_version"] is None for x in libs)
    assert len(warnings) == 5
    assert sum(w.startswith("nvidia-nccl-cu13 2.30.7: nvidia/nccl/lib/") for w in warnings) == 3
    assert any(w.startswith("nvidia-cuda-runtime 13.0.96: ") for w in warnings)


def _torch(site: Path, *, runpath: bool, eager: bool, cuda_lib: Path, nccl: Path) -> None:
    """A torch whose libraries find the wheels' as torch's own do: by $ORIGIN paths."""
    origin = "$ORIGIN/../../nvidia/nccl/lib:$ORIGIN/../../nvidia/cu13/lib"
    kind = {"runpath": origin} if runpath else {"rpath": origin}
    lib = site / "torch" / "lib"
    build_lib(lib / "libtorch_global_deps.so", "libtorch_global_deps.so", needed=[cuda_lib], **kind)
    build_lib(lib / "libtorch_cuda.so", "libtorch_cuda.so", needed=[cuda_lib, nccl], **kind)
    init = "_preload_cuda_deps(required=False)\n" if eager else "pass\n"
    (site / "torch" / "__init__.py").write_text(init)
    (site / "torch" / "version.py").write_text("__version__ = '2.14.1+cu130'\ncuda = '13.0'\n")
    if not list(site.glob("torch-*.dist-info")):
        _dist(site, "torch", "2.14.1+cu130", "torch/lib/libtorch_cuda.so")


@pytest.fixture
def gpu_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    nccl = build_lib(site / NCCL, "libnccl.so.2", text="NCCL version 2.30.7+cuda13.3")
    cudart = build_lib(site / "nvidia/cu13/lib/libcudart.so.13", "libcudart.so.13")
    _dist(site, "nvidia-nccl-cu13", "2.30.7", NCCL)
    _dist(site, "nvidia-cuda-runtime", "13.0.96", "nvidia/cu13/lib/libcudart.so.13")
    system = tmp_path / "system"
    build_lib(system / "libnccl.so.2.21.5", "libnccl.so.2", text="NCCL version 2.21.5+cuda12.4")
    (system / "libnccl.so.2").symlink_to("libnccl.so.2.21.5")
    site.joinpath("nccl-path").write_text(str(nccl))
    site.joinpath("cudart-path").write_text(str(cudart))
    return site


def _picks(site: Path, environ: dict[str, str]) -> dict[str, tuple[Any, ...]]:
    libs, _ = scan(site, environ)
    return {
        x["path"]: (x["loader_pick"], x["loader_pick_why"], x["loader_pick_version"]) for x in libs
    }


@needs_gcc
def test_ld_library_path_shadows_the_wheel_for_a_torch_linked_with_runpath(gpu_site: Path) -> None:
    nccl, cudart = (
        Path(gpu_site.joinpath("nccl-path").read_text()),
        Path(gpu_site.joinpath("cudart-path").read_text()),
    )
    _torch(gpu_site, runpath=True, eager=False, cuda_lib=cudart, nccl=nccl)
    system = gpu_site.parent / "system"
    picks = _picks(gpu_site, {"LD_LIBRARY_PATH": f"relative:{system}"})
    assert picks[NCCL] == (str(system / "libnccl.so.2.21.5"), "LD_LIBRARY_PATH", "2.21.5+cuda12.4")
    assert picks["nvidia/cu13/lib/libcudart.so.13"] == (
        "nvidia/cu13/lib/libcudart.so.13",
        "RUNPATH",
        "13",
    )
    # A folder whose name would drive a terminal is searched as ld.so searches it; the
    # report names it by its escape.
    odd = gpu_site.parent / "odd\x1b[2J"
    build_lib(odd / "libnccl.so.2", "libnccl.so.2", text="NCCL version 2.19.3")
    picks = _picks(gpu_site, {"LD_LIBRARY_PATH": f"{odd}:{system}"})
    shown = str(gpu_site.parent / "odd\\x1b[2J" / "libnccl.so.2")
    assert picks[NCCL] == (shown, "LD_LIBRARY_PATH", "2.19.3")
    # Without LD_LIBRARY_PATH, torch's RUNPATH finds the wheel's.
    assert _picks(gpu_site, {})[NCCL] == (NCCL, "RUNPATH", "2.30.7+cuda13.3")


@needs_gcc
def test_rpath_and_torchs_preload_win_over_ld_library_path(gpu_site: Path) -> None:
    nccl, cudart = (
        Path(gpu_site.joinpath("nccl-path").read_text()),
        Path(gpu_site.joinpath("cudart-path").read_text()),
    )
    system = gpu_site.parent / "system"
    _torch(gpu_site, runpath=False, eager=False, cuda_lib=cudart, nccl=nccl)
    assert _picks(gpu_site, {"LD_LIBRARY_PATH": str(system)})[NCCL][:2] == (NCCL, "RPATH")
    _torch(gpu_site, runpath=True, eager=True, cuda_lib=cudart, nccl=nccl)
    assert _picks(gpu_site, {"LD_LIBRARY_PATH": str(system)})[NCCL][:2] == (NCCL, "torch preload")


@needs_gcc
@pytest.mark.parametrize("eager", [False, True])
def test_a_venv_reached_through_a_symlink_loads_the_wheels_own_libraries(
    gpu_site: Path, eager: bool
) -> None:
    """A symlinked .venv (or home): the loader's picks are real paths, and one inside the
    venv is the wheel's own file, not a library from elsewhere (the compare says
    "shadowed" for any other pick)."""
    nccl, cudart = (
        Path(gpu_site.joinpath("nccl-path").read_text()),
        Path(gpu_site.joinpath("cudart-path").read_text()),
    )
    _torch(gpu_site, runpath=True, eager=eager, cuda_lib=cudart, nccl=nccl)
    # a link inside the venv is no link out of it
    (gpu_site / "nvidia/cu13/lib/libcudart.so").symlink_to("libcudart.so.13")
    _dist(gpu_site, "cuda-link", "1", "nvidia/cu13/lib/libcudart.so")
    linked = gpu_site.parent / "venv-link"
    linked.symlink_to(gpu_site)
    direct, through = scan(gpu_site), scan(linked)
    assert through == direct
    picks = {x["path"]: x["loader_pick"] for x in through[0]}
    assert picks[NCCL] == NCCL and picks["nvidia/cu13/lib/libcudart.so.13"] == (
        "nvidia/cu13/lib/libcudart.so.13"
    )
    assert not any(x["error"] for x in through[0])


@needs_gcc
def test_the_library_scan_and_the_fit_check_follow_torchs_import_once(
    gpu_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe gives both one loader (main.probe): torch's import is followed once, and
    each answers what it answers with a loader of its own."""
    nccl, cudart = (
        Path(gpu_site.joinpath("nccl-path").read_text()),
        Path(gpu_site.joinpath("cudart-path").read_text()),
    )
    _torch(gpu_site, runpath=True, eager=True, cuda_lib=cudart, nccl=nccl)
    # An extension built against torch: what the fit check follows torch's import for.
    build_lib(
        gpu_site / "ext" / "_ops.so", "_ops.so",
        needed=[gpu_site / "torch" / "lib" / "libtorch_cuda.so"],
        runpath="$ORIGIN/../torch/lib",
    )  # fmt: skip
    _dist(gpu_site, "ext", "1.0", "ext/_ops.so")
    environ = {"LD_LIBRARY_PATH": str(gpu_site.parent / "system")}
    sites = [str(gpu_site)]

    def both(loader: Any) -> tuple[Any, Any, list[str]]:
        warnings: list[str] = []
        packages = script.scan_packages(sites, warnings)
        torch = script.torch_build(packages, warnings)
        libs = script.libraries(sites, packages, torch, environ, warnings, None, loader=loader)
        fits = script.fit(sites, packages, torch, environ, warnings, None, loader=loader)
        return libs, fits, warnings

    apart = both(None)
    followed = []
    ldso = script.torch_loads.__globals__  # this package's (another test file installs its own)
    real = ldso["_torch_loads"]
    monkeypatch.setitem(ldso, "_torch_loads", lambda *a: followed.append(a) or real(*a))
    shared = script.Loader(script.Reader(None), environ, [])
    assert both(shared) == apart
    assert len(followed) == 1
    assert any(lib["loader_pick_why"] == "torch preload" for lib in apart[0])
    assert apart[1]["checked"] == 1  # the fit check followed torch's import too


@needs_gcc
def test_an_unchanged_library_is_not_read_again_and_a_rewritten_one_is(tmp_path: Path) -> None:

    from factories import make_venv, probe_report

    venv = tmp_path / "venv"
    make_venv(venv)
    site = next((venv / "lib").glob("python*/site-packages"))
    lib = build_lib(site / NCCL, "libnccl.so.2", text="NCCL version 2.30.7+cuda13.3")
    _dist(site, "nvidia-nccl-cu13", "2.30.7", NCCL)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}

    def probe() -> dict[str, Any]:
        (found,) = probe_report(venv, env)["libraries"]
        return dict(found)

    assert probe()["embedded_version"] == "2.30.7+cuda13.3"
    shard = cache_file(tmp_path / "xdg")
    kept = read_cache(shard)
    (key,) = [k for k in kept["libs"] if k.endswith("libnccl.so.2")]
    # What the cache holds is what the next run reports: the file is not searched again.
    kept["libs"][key]["string"] = "2.30.6"
    write_cache(shard, kept)
    assert probe()["embedded_version"] == "2.30.6"
    # Rewritten in place, same size, its mtime put back: read again.
    st = lib.stat()
    lib.write_bytes(lib.read_bytes().replace(b"2.30.7+cuda13.3", b"2.28.9+cuda12.9"))
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert probe()["embedded_version"] == "2.28.9+cuda12.9"


@needs_gcc
def test_the_libraries_a_running_process_has_mapped(tmp_path: Path) -> None:
    import subprocess
    import sys

    lib = build_lib(tmp_path / "sys" / "libnccl.so.2", "libnccl.so.2", text="NCCL version 2.21.5")
    with subprocess.Popen(
        [sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(lib)!r}); print(1); input()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as trainer:
        try:
            assert trainer.stdout is not None and trainer.stdout.readline() == "1\n"
            warnings: list[str] = []
            reader = script.Reader(None)
            assert script.mapped(trainer.pid, reader, warnings) == {"libnccl.so.2": str(lib)}
            # Replaced on disk while the process runs: it still has the old one mapped.
            lib.unlink()
            build_lib(lib, "libnccl.so.2", text="NCCL version 2.30.7")
            assert script.mapped(trainer.pid, script.Reader(None), warnings) == {
                "libnccl.so.2": f"{lib} (deleted)"
            }
            assert warnings == []
        finally:
            trainer.kill()
    assert script.mapped(trainer.pid, reader, warnings) == {}
    assert warnings == [
        f"--pid {trainer.pid}: /proc/{trainer.pid}/maps unreadable (No such file or directory)"
    ]


@needs_gcc
@pytest.mark.parametrize("linked", ["rpath", "runpath"])
@pytest.mark.parametrize("ld_path", [True, False])
def test_the_loader_model_picks_what_glibc_loads(
    tmp_path: Path, linked: str, ld_path: bool
) -> None:
    import subprocess
    import sys

    wheel = build_lib(tmp_path / "site" / NCCL, "libnccl.so.2", text="NCCL version 2.30.7")
    system = build_lib(tmp_path / "system" / "libnccl.so.2", "libnccl.so.2")
    origin = {linked: "$ORIGIN/../../nvidia/nccl/lib"}
    torch = tmp_path / "site" / "torch" / "lib" / "libtorch_cuda.so"
    build_lib(torch, "libtorch_cuda.so", needed=[wheel], **origin)
    env = {"LD_LIBRARY_PATH": str(system.parent)} if ld_path else {}
    loader = script.Loader(script.Reader(None), env, [])
    model = loader.find("libnccl.so.2", str(torch))
    code = f"import ctypes; ctypes.CDLL({str(torch)!r}); print(open('/proc/self/maps').read())"
    maps = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env}
        if ld_path
        else {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (loaded,) = {line.split()[-1] for line in maps.splitlines() if line.endswith("libnccl.so.2")}
    assert model is not None and model[0] == os.path.realpath(loaded)
    shadowed = ld_path and linked == "runpath"
    assert model[0] == str(system if shadowed else wheel)
