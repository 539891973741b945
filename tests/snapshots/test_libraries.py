"""The version inside the GPU libraries of real venvs: two wheels that install one
libnccl.so.2, in both orders, and a library LD_LIBRARY_PATH shadows, measured by the real
probe and compared by `diff`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from elflibs import build_lib, needs_gcc
from envguard import api
from envguard.compare.policy import Policy
from envguard.errors import UsageError
from envguard.snapshots.capture import capture_snapshot
from envguard.snapshots.models import Snapshot
from envguard.snapshots.request import CaptureRequest
from envguard.testing import make_wheel
from factories import uv_install

pytestmark = [needs_gcc, pytest.mark.slow]

NCCL = "nvidia/nccl/lib/libnccl.so.2"


@pytest.fixture(scope="module")
def nccl_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nvidia-nccl-cu12 2.28.9 and nvidia-nccl-cu13 2.30.7, each installing libnccl.so.2
    that says its own version; and a torch whose libraries find NCCL by DT_RUNPATH."""
    out = tmp_path_factory.mktemp("nccl-wheels")
    built = tmp_path_factory.mktemp("nccl-built")
    for name, version, cuda in (("cu12", "2.28.9", "12.9"), ("cu13", "2.30.7", "13.3")):
        lib = build_lib(
            built / name / "libnccl.so.2", "libnccl.so.2", text=f"NCCL version {version}+cuda{cuda}"
        )
        make_wheel(out, f"nvidia-nccl-{name}", version, files={NCCL: lib.read_bytes()})
    nccl = built / "cu13" / "libnccl.so.2"
    origin = "$ORIGIN/../../nvidia/nccl/lib"
    lib = built / "torch"
    deps = build_lib(lib / "libtorch_global_deps.so", "libtorch_global_deps.so", runpath=origin)
    cuda = build_lib(lib / "libtorch_cuda.so", "libtorch_cuda.so", needed=[nccl], runpath=origin)
    version_py = "__version__ = '2.14.1+cu130'\ncuda = '13.0'\n"
    make_wheel(
        out,
        "torch",
        "2.14.1+cu130",
        files={
            "torch/__init__.py": "raise ImportError('envguard must never import torch')\n",
            "torch/version.py": version_py,
            "torch/lib/libtorch_global_deps.so": deps.read_bytes(),
            "torch/lib/libtorch_cuda.so": cuda.read_bytes(),
        },
    )
    return out


def snap(venv: Path, tmp_path: Path) -> Snapshot:
    return capture_snapshot(
        CaptureRequest(python=venv / "bin" / "python", name="good", cwd=tmp_path)
    )


def drift_of(good: Snapshot, venv: Path) -> list[tuple[str, str, str]]:
    drift = api.diff(good, python=str(venv / "bin" / "python"), policy=Policy())
    return [
        (c.kind, c.severity.value, c.message) for c in drift.changes if c.section == "libraries"
    ]


def test_a_clobbered_libnccl_is_critical_in_either_install_order(
    tmp_path: Path, venv_factory: Callable[..., Path], nccl_wheels: Path
) -> None:
    venv = venv_factory("cu13-last")
    uv_install(venv, nccl_wheels, "nvidia-nccl-cu13==2.30.7")
    good = snap(venv, tmp_path)
    (lib,) = good.libraries
    assert (lib.path, lib.dist, lib.embedded_version) == (
        NCCL,
        "nvidia-nccl-cu13",
        "2.30.7+cuda13.3",
    )
    assert drift_of(good, venv) == []
    # The cu12 wheel, installed later, writes its libnccl.so.2 over the cu13 one.
    uv_install(venv, nccl_wheels, "nvidia-nccl-cu12==2.28.9")
    changes = drift_of(good, venv)
    assert (
        "mismatch",
        "critical",
        "libnccl.so.2: nvidia-nccl-cu13 says 2.30.7, the file says 2.28.9+cuda12.9"
        " (also claimed by nvidia-nccl-cu12 2.28.9)",
    ) in changes
    assert ("changed", "critical") in {(k, s) for k, s, _ in changes}

    # The other order: the cu13 file wins, and the cu12 metadata is the one it contradicts.
    other = venv_factory("cu12-first")
    uv_install(other, nccl_wheels, "nvidia-nccl-cu12==2.28.9")
    uv_install(other, nccl_wheels, "nvidia-nccl-cu13==2.30.7")
    (lib,) = snap(other, tmp_path).libraries
    assert (lib.dist, lib.embedded_version) == ("nvidia-nccl-cu12", "2.30.7+cuda13.3")
    live_vs_first = drift_of(good, other)
    assert [k for k, _, _ in live_vs_first] == ["mismatch"]


def test_a_libnccl_shadowed_by_ld_library_path_is_named(
    tmp_path: Path,
    venv_factory: Callable[..., Path],
    nccl_wheels: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    venv = venv_factory("torch")
    uv_install(venv, nccl_wheels, "nvidia-nccl-cu13==2.30.7", "torch==2.14.1+cu130")
    good = snap(venv, tmp_path)
    (lib,) = good.libraries
    assert (lib.loader_pick, lib.loader_pick_why) == (NCCL, "RUNPATH")
    system = tmp_path / "usr-lib"
    build_lib(system / "libnccl.so.2.21.5", "libnccl.so.2", text="NCCL version 2.21.5+cuda12.4")
    (system / "libnccl.so.2").symlink_to("libnccl.so.2.21.5")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(system))
    changes = drift_of(good, venv)
    picked = system / "libnccl.so.2.21.5"
    assert changes == [
        ("pick", "critical", f"torch loads libnccl.so.2 from {NCCL} -> {picked}"),
        (
            "shadowed",
            "critical",
            f"torch will load {picked} (2.21.5+cuda12.4, by LD_LIBRARY_PATH), not the wheel's {NCCL}",
        ),
    ]


def test_snapshot_pid_records_the_copy_a_running_trainer_mapped(
    tmp_path: Path, venv_factory: Callable[..., Path], nccl_wheels: Path
) -> None:
    import subprocess
    import sys

    venv = venv_factory("torch-pid")
    uv_install(venv, nccl_wheels, "nvidia-nccl-cu13==2.30.7", "torch==2.14.1+cu130")
    system = build_lib(
        tmp_path / "usr-lib" / "libnccl.so.2", "libnccl.so.2", text="NCCL version 2.21.5"
    )
    load = f"import ctypes; ctypes.CDLL({str(system)!r}); print(1); input()"
    with subprocess.Popen(
        [sys.executable, "-c", load], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as trainer:
        try:
            assert trainer.stdout is not None and trainer.stdout.readline() == "1\n"
            good = api.snapshot(python=venv / "bin" / "python", name="good", pid=trainer.pid)
        finally:
            trainer.kill()
    (lib,) = good.libraries
    assert (lib.path, lib.mapped, lib.loader_pick) == (NCCL, str(system), NCCL)
    assert drift_of(good, venv) == [
        (
            "pick",
            "critical",
            f"the good run had libnccl.so.2 mapped from {system}; torch would load {NCCL} now",
        )
    ]
    with pytest.raises(UsageError, match="--pid 0: not a process id"):
        api.snapshot(python=venv / "bin" / "python", pid=0)
    with pytest.raises(UsageError, match=f"--pid {trainer.pid}: no such process here"):
        api.snapshot(python=venv / "bin" / "python", pid=trainer.pid)
