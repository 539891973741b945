"""The tools a probe asks (nvcc, the C++ compiler, nvidia-smi): the same answers, fewer
starts. nvcc's and the compiler's ``--version`` are their binaries' own, kept in the
distribution cache while those binaries are unchanged; nvidia-smi reads the live driver and
is asked at every probe, once."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from elflibs import NVCC, needs_gcc
from elflibs import build_program as _program
from envguard.probe.payload import local_package

system = local_package().system
DistCache = local_package().distcache.DistCache


def _runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _version(tool: Path | str, folder: Path) -> str | None:
    """One probe's answer: a fresh cache read from ``folder``, asked, finished, saved."""
    cache = DistCache(str(folder), ["/site"], code="test", quiet=0)
    job = system.start_version(str(tool), cache)
    text: str | None = system.finish_version(job, cache)
    cache.save()
    return text


@needs_gcc
def test_an_unchanged_compiler_is_asked_once(tmp_path: Path) -> None:
    log, cache = tmp_path / "log", tmp_path / "cache" / "dists"
    gxx = _program(tmp_path / "x86_64-linux-gnu-g++-12", log, "g++ (Test) 12.2.0\nCopyright\n")
    link = tmp_path / "bin" / "g++"
    link.parent.mkdir()
    link.symlink_to(gxx)
    assert _version(link, cache) == "g++ (Test) 12.2.0\nCopyright\n"
    assert _version(link, cache) == "g++ (Test) 12.2.0\nCopyright\n"
    assert _runs(log) == 1, "the second probe started the compiler again"
    # The name it is run by is part of its answer (gcc prints it): asked for that name.
    assert _version(gxx, cache) == "g++ (Test) 12.2.0\nCopyright\n"
    assert _runs(log) == 2
    # Replaced (a new build, an upgrade): asked again.
    gxx.unlink()
    _program(gxx, log, "g++ (Test) 13.1.0\n")
    assert _version(link, cache) == "g++ (Test) 13.1.0\n"
    assert _runs(log) == 3


@needs_gcc
def test_an_exec_wrapper_is_followed_and_any_other_script_is_run(tmp_path: Path) -> None:
    log, cache = tmp_path / "log", tmp_path / "cache" / "dists"
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    real = _program(tmp_path / "cuda" / "bin" / "nvcc", log, NVCC)
    wrapper = tmp_path / "nvcc"
    wrapper.write_text(f'#!/bin/sh\n# the toolkit\'s nvcc\nexec {real} "$@"\n')
    wrapper.chmod(stat.S_IRWXU)
    assert _version(wrapper, cache) == NVCC
    assert _version(wrapper, cache) == NVCC
    assert _runs(log) == 1
    # The wrapper edited in place: its own stamp is part of the key.
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    assert _version(wrapper, cache) == NVCC
    assert _runs(log) == 2
    # A script that does anything else (here: sets a variable first) is run every time.
    other = tmp_path / "other" / "nvcc"
    other.parent.mkdir()
    other.write_text(f'#!/bin/sh\nexport CUDA_HOME=/x\nexec {real} "$@"\n')
    other.chmod(stat.S_IRWXU)
    assert _version(other, cache) == NVCC
    assert _version(other, cache) == NVCC
    assert _runs(log) == 4


@needs_gcc
def test_a_wrapper_that_runs_another_compiler_and_a_failure_are_not_kept(
    tmp_path: Path,
) -> None:
    """ccache as g++ runs whichever g++ comes next on PATH: its answer is not its own."""
    log, cache = tmp_path / "log", tmp_path / "cache" / "dists"
    ccache = _program(tmp_path / "ccache", log, "g++ (Test) 12.2.0\n")
    link = tmp_path / "bin" / "g++"
    link.parent.mkdir()
    link.symlink_to(ccache)
    assert _version(link, cache) == _version(link, cache) == "g++ (Test) 12.2.0\n"
    assert _runs(log) == 2
    failing = _program(tmp_path / "nvcc", tmp_path / "log2", "half", code=1)
    assert _version(failing, cache) is None and _version(failing, cache) is None
    assert _runs(tmp_path / "log2") == 2


def _smi(tmp_path: Path, *, old_driver: bool = False) -> tuple[Path, Path]:
    """A fake nvidia-smi on PATH answering for two GPUs; an ``old_driver`` refuses the
    compute_cap column (drivers before R510). Logs each run's query."""
    folder = tmp_path / "smi"
    folder.mkdir()
    log = folder / "log"
    refuse = "  *compute_cap,*|*,compute_cap*) exit 2 ;;\n" if old_driver else ""
    (folder / "nvidia-smi").write_text(
        f'#!/bin/sh\necho "$1" >> {log}\ncase "$1" in\n{refuse}'
        "  *name,driver_version,compute_cap)\n"
        "    echo 'NVIDIA H100 80GB HBM3, 580.82.07, 9.0'\n"
        "    echo 'NVIDIA A100-SXM4-40GB, 580.82.07, 8.0' ;;\n"
        "  *name,driver_version)\n"
        "    echo 'NVIDIA H100 80GB HBM3, 580.82.07'\n"
        "    echo 'NVIDIA A100-SXM4-40GB, 580.82.07' ;;\n"
        "  *compute_cap) echo 9.0; echo 8.0 ;;\nesac\n"
    )
    (folder / "nvidia-smi").chmod(stat.S_IRWXU)
    return folder, log


def _asked_apart() -> tuple[str | None, str | None]:
    """The two queries as the probe asked them before."""
    first = system.start_tool(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
    )
    second = system.start_tool(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
    return system.finish_tool(first), system.finish_tool(second)


def _asked_together(nodes: list[str]) -> tuple[str | None, str | None]:
    started = system.start_tool(
        ["nvidia-smi", "--query-gpu=" + system.GPU_COLUMNS, "--format=csv,noheader"]
    )
    answers: tuple[str | None, str | None] = system.gpu_answers(started, nodes)
    return answers


def test_nvidia_smi_is_asked_once_for_the_same_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, log = _smi(tmp_path)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    apart = _asked_apart()
    log.unlink()
    together = _asked_together([])
    assert together == apart
    assert len(log.read_text().splitlines()) == 1
    gpus, caps = together
    assert system.accelerator(gpus, None)["gpus"] == [
        "NVIDIA H100 80GB HBM3",
        "NVIDIA A100-SXM4-40GB",
    ]
    assert local_package().compilekey.capabilities(caps) == ["9.0", "8.0"]


def test_a_driver_without_compute_cap_is_asked_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, log = _smi(tmp_path, old_driver=True)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    apart = _asked_apart()
    assert apart[0] is not None and apart[1] is not None
    driver = tmp_path / "nvidiactl"  # a driver is there: the failure was the column
    driver.touch()
    assert _asked_together([str(driver)]) == apart
    # No driver at all: the one failed query is the answer (nothing more is started).
    log.unlink()
    assert _asked_together([str(tmp_path / "none")]) == (None, None)
    assert len(log.read_text().splitlines()) == 1


def test_a_missing_nvidia_smi_costs_a_path_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert system.start_tool(["nvidia-smi", "--query-gpu=" + system.GPU_COLUMNS]) is None
    assert system.gpu_answers(None) == (None, None)
