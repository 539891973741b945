"""The gate, ``check`` and the scheduler's checks fail on the same things (issue 34): real
two-node launches (torchrun behind ``envguard gate --torchrun``, 127.0.0.1) beside
``envguard check`` and the NHC check on the same venvs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from distributed.test_torchrun import _launch
from examples.test_scheduler_hooks import _nhc_standin
from torchstack import NEEDS_TORCH

pytestmark = [pytest.mark.slow, NEEDS_TORCH]

ENVGUARD = str(Path(sys.executable).parent / "envguard")
PATCHED = "torch/nn/functional.py"


def _replace(path: Path, data: bytes) -> None:
    """A new file in ``path``'s place: the venvs' files are hard links into uv's cache, and
    an edit in place would edit every venv (and the cache)."""
    path.unlink()
    path.write_bytes(data)


@pytest.fixture
def patched(torch_venvs: dict[str, Path]) -> Iterator[Path]:
    """The venv "same" with one torch file hot-patched (a line appended), put back after."""
    venv = torch_venvs["same"]
    (target,) = venv.glob(f"lib/python3*/site-packages/{PATCHED}")
    original = target.read_bytes()
    _replace(target, original + b"\nHOT_PATCH = True\n")
    yield venv
    _replace(target, original)


def _snapshot(venv: Path, out: Path) -> Path:
    argv = [ENVGUARD, "snapshot", "--python", str(venv), "--out", str(out), "-q"]
    subprocess.run(argv, check=True, capture_output=True, timeout=300)
    return out


def _check(snap: Path, venv: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [ENVGUARD, "check", str(snap), "--python", str(venv), "--format", "table"]
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_a_hot_patched_torch_file_fails_the_gate_and_check_alike(
    torch_venvs: dict[str, Path], patched: Path, tmp_path: Path
) -> None:
    snap = _snapshot(torch_venvs["a"], tmp_path / "good.json")
    checked = _check(snap, patched, tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert PATCHED in checked.stdout and "modified in place" in checked.stdout
    # Before this issue the gate passed this node: its RECORD is untouched.
    host = socket.gethostname()
    for result in _launch((torch_venvs["a"], patched), tmp_path, launcher=True):
        assert result.returncode == 1, result.stderr
        assert result.stderr.startswith(
            "error: environments differ across the job, no majority: node"
            f" {host}[node 0] (node rank 0) vs node {host}[node 1] (node rank 1):"
            f" torch: {PATCHED} edited in place"
        ), result.stderr
        assert "all_reduce" not in result.stdout


def test_a_plain_package_change_is_weighed_alike_by_nhc_and_the_gate(
    torch_venvs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gatepkg 1.0 on one node, 1.1 on the other: the defaults stop both the job (gate) and
    the node (NHC, the prolog's check); `fail-on = "critical"` in [tool.envguard] lets
    both through."""
    snap = _snapshot(torch_venvs["a"], tmp_path / "good.json")
    odd = torch_venvs["odd"]
    drained = _nhc_standin(snap, odd)
    assert drained.stdout == "die 1: envguard: other packages: 1 upgraded\n"
    # The gate's refusal with the defaults: test_torchrun's launcher test.
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.envguard]\nfail-on = "critical"\n')
    monkeypatch.setenv("ENVGUARD_PROJECT", str(project))
    admitted = _nhc_standin(snap, odd)
    assert (admitted.returncode, admitted.stdout) == (0, "")
    for rank, result in enumerate(_launch((torch_venvs["a"], odd), project, launcher=True)):
        assert result.returncode == 0, result.stderr
        assert "envguard gate: passed" in result.stderr
        assert f"rank {rank}: all_reduce 2" in result.stdout
