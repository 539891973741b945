"""The rank gate with real torch on CPU: two ``torchrun --nnodes 2`` launches on this
machine, each with a venv of its own (torch 2.13.0+cpu, envguard installed from this
checkout), exchanging through torchrun's own rendezvous store, then gloo.

Needs the torch wheel in /opt/wheels (or ENVGUARD_TORCH_WHEELS) and an index holding
torch's dependencies and envguard's (ENVGUARD_TEST_INDEX, default the local
/opt/pypi/simple); skipped where they are not.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from torchstack import NEEDS_TORCH, run_both

pytestmark = [
    pytest.mark.slow,
    NEEDS_TORCH,
]

TRAIN = """\
import os, sys, time
import envguard.distributed
assert "torch" not in sys.modules, "import envguard.distributed imported torch"
import torch
import torch.distributed as dist
from envguard.errors import EnvguardError

started = time.time()
try:
    envguard.distributed.assert_homogeneous(timeout=60)
except EnvguardError as exc:
    print(f"GATE FAILED {started:.3f} {time.time():.3f}: {exc.message}", file=sys.stderr, flush=True)
    sys.exit(3)
print(f"gate passed after {time.time() - started:.3f} s", flush=True)
dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
print(f"rank {dist.get_rank()}: all_reduce {total.item():g}", flush=True)
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _launch(
    venvs: tuple[Path, Path], tmp_path: Path, *, launcher: bool = False
) -> list[subprocess.CompletedProcess[str]]:
    """Both torchrun launches, each from its venv; ``launcher``: behind ``envguard gate
    --torchrun --``, with a training script that does not gate itself."""
    script = tmp_path / "train.py"
    train = TRAIN.replace("envguard.distributed.assert_homogeneous(", "(lambda **_: 0)(")
    script.write_text(train if launcher else TRAIN, encoding="utf-8")
    port = str(_free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK"))}
    common = ["--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port]
    common.append(str(script))
    gate = ["gate", "--torchrun", "--timeout", "60", "--"]
    lines = [
        ([str(venv / "bin" / "envguard"), *gate] if launcher else [])
        + [str(venv / "bin" / "torchrun"), "--nnodes", "2", f"--node-rank={rank}", *common]
        for rank, venv in enumerate(venvs)
    ]
    return run_both(lines, [env, env], tmp_path, 240)


def test_one_package_apart_both_nodes_abort_naming_the_node_and_package(
    torch_venvs: dict[str, Path], tmp_path: Path
) -> None:
    results = _launch((torch_venvs["a"], torch_venvs["odd"]), tmp_path)
    host = socket.gethostname()
    entered, aborted = [], []
    for result in results:
        assert result.returncode != 0, result.stdout + result.stderr
        failed = re.search(r"GATE FAILED ([0-9.]+) ([0-9.]+): (.*)", result.stderr)
        assert failed, result.stderr
        entered.append(float(failed.group(1)))
        aborted.append(float(failed.group(2)))
        # Two launches on one host: the nodes are told apart by torchrun's node rank.
        # Two nodes: no majority, so both sides are named (node 0 is as suspect as node 1).
        assert failed.group(3) == (
            f"environments differ across the job, no majority: node {host}[node 0] (rank 0)"
            f" vs node {host}[node 1] (rank 1): gatepkg 1.0 -> 1.1"
        )
        assert "all_reduce" not in result.stdout
    # Both abort within 2 s of the second one reaching the gate (the first one's wait for
    # the other's torch import is the launch's skew, not the gate's).
    assert max(aborted) - max(entered) < 2.0


def test_identical_venvs_start_and_all_reduce(torch_venvs: dict[str, Path], tmp_path: Path) -> None:
    results = _launch((torch_venvs["a"], torch_venvs["same"]), tmp_path)
    for rank, result in enumerate(results):
        assert result.returncode == 0, result.stderr
        assert "gate passed" in result.stdout
        assert f"rank {rank}: all_reduce 2" in result.stdout


def test_without_torchrun_the_gate_serves_its_own_store_and_names_a_missing_rank(
    torch_venvs: dict[str, Path], tmp_path: Path
) -> None:
    """MASTER_ADDR/PORT, RANK, WORLD_SIZE set by hand (srun, mpirun): rank 0 serves the gate
    at MASTER_PORT + 1; rank 1 never comes."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN.replace("timeout=60", "timeout=1"), encoding="utf-8")
    env = dict(os.environ, RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    env["MASTER_PORT"] = str(_free_port())
    python = torch_venvs["a"] / "bin" / "python"
    result = subprocess.run(
        [str(python), str(script)], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 3
    assert "rank 1 of 2 never arrived at the environment gate within 1 s" in result.stderr


def test_on_a_launcher_line_the_gate_stops_both_nodes_before_torchrun(
    torch_venvs: dict[str, Path], tmp_path: Path
) -> None:
    results = _launch((torch_venvs["a"], torch_venvs["odd"]), tmp_path, launcher=True)
    host = socket.gethostname()
    for result in results:
        assert result.returncode == 1, result.stderr
        assert result.stderr == (
            "error: environments differ across the job, no majority: node"
            f" {host}[node 0] (node rank 0) vs node {host}[node 1] (node rank 1):"
            " gatepkg 1.0 -> 1.1\n"
            "hint: envguard diff between a node of each group shows all of it\n"
        )


def test_on_a_launcher_line_identical_nodes_go_on_to_torchrun(
    torch_venvs: dict[str, Path], tmp_path: Path
) -> None:
    results = _launch((torch_venvs["a"], torch_venvs["same"]), tmp_path, launcher=True)
    for rank, result in enumerate(results):
        assert result.returncode == 0, result.stderr
        assert "envguard gate: passed" in result.stderr
        assert f"rank {rank}: all_reduce 2" in result.stdout
