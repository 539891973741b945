"""The launcher form (``envguard gate --torchrun -- ...``) without torch: its own store,
torchrun's command line read as torchrun reads it, c10d rendezvous without --node-rank.
Two launches on 127.0.0.1, real processes, ended by PID."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from envguard.errors import UsageError
from envguard.launchers import Launch, option_strings, torchrun_launch
from torchstack import NEEDS_TORCH
from torchstack import run_both as _run_both

HERE = socket.gethostname()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def standin(tmp_path: Path) -> Path:
    """A torchrun stand-in that says what it was given (the gate execs it once passed)."""
    path = tmp_path / "torchrun"
    path.write_text('#!/bin/sh\necho "torchrun $*"\n', encoding="utf-8")
    path.chmod(0o755)
    return path


def test_c10d_without_node_rank_two_nodes_pass_without_torch(standin: Path, tmp_path: Path) -> None:
    """Before: both launches took node rank 0, and one said the other "never arrived"
    after the timeout, with a traceback. This interpreter has no torch at all."""
    gate = [sys.executable, "-m", "envguard", "gate", "--torchrun", "--timeout", "30", "--"]
    endpoint = f"127.0.0.1:{_free_port()}"
    line = [*gate, str(standin), "--nnodes=2", "--rdzv-backend", "c10d", "--rdzv_endpoint"]
    results = _run_both([[*line, endpoint, "t.py"]] * 2, [{}, {}], tmp_path, 60)
    for result in results:
        assert result.returncode == 0, result.stderr
        assert result.stderr.startswith("envguard gate: passed (")
        assert (
            result.stdout
            == f"torchrun --nnodes=2 --rdzv-backend c10d --rdzv_endpoint {endpoint} t.py\n"
        )


def test_a_third_node_on_a_two_node_rendezvous_is_named(standin: Path, tmp_path: Path) -> None:
    gate = [sys.executable, "-m", "envguard", "gate", "--torchrun", "--timeout", "20", "--"]
    endpoint = f"127.0.0.1:{_free_port()}"
    line = [
        *gate,
        str(standin),
        "--nnodes",
        "2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint",
        endpoint,
        "t.py",
    ]
    results = _run_both([line] * 3, [{}, {}, {}], tmp_path, 60)
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 0, 1], [r.stderr for r in results]
    (odd,) = [r for r in results if r.returncode == 1]
    gate_at = f"127.0.0.1:{int(endpoint.rpartition(':')[2]) + 1}"  # the rendezvous port + 1
    # Named while the gate's store is up; a loaded machine may start it after the two went
    # on (then it serves alone and its partner never comes): never a pass either way.
    assert odd.stderr.startswith(
        (
            f"error: more than --nnodes 2 nodes came to the gate at {gate_at}",
            "error: node 1 of 2 never arrived",
        )
    ), odd.stderr
    assert "Traceback" not in odd.stderr


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (
            [
                "torchrun",
                "--nnode",
                "2",
                "--node_r",
                "1",
                "--master_a",
                "n0",
                "--master-port=9",
                "t.py",
            ],
            {},
            Launch(1, 2, "n0", 9),
        ),
        (
            [
                "python3",
                "-u",
                "-m",
                "torch.distributed.run",
                "--nnodes=4",
                "--node-rank=3",
                "t.py",
                "--nnodes",
                "9",
            ],
            {},
            Launch(3, 4, "127.0.0.1", 29500),
        ),
        (
            ["/opt/bin/torchrun", "t.py"],
            {
                "PET_NNODES": "2",
                "PET_NODE_RANK": "1",
                "PET_MASTER_ADDR": "head",
                "PET_MASTER_PORT": "23456",
            },
            Launch(1, 2, "head", 23456),
        ),
        (
            [
                "torchrun",
                "--nnodes",
                "2:2",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                "[::1]:7",
                "--node-rank",
                "1",
                "t.py",
            ],
            {},
            Launch(None, 2, "::1", 7),
        ),
        (
            ["torchrun", "--standalone", "--nproc-per-node", "8", "t.py"],
            {"PET_NNODES": "4"},
            Launch(0, 1, "127.0.0.1", 29400),
        ),
        (
            ["python", "-mtorch.distributed.run", "t.py"],
            {"PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "h"},
            Launch(None, 1, "h", 29400),
        ),
    ],
)
def test_torchrun_lines_are_read_as_torchrun_reads_them(
    argv: list[str], environ: dict[str, str], expected: Launch
) -> None:
    assert torchrun_launch(argv, environ) == expected


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["bash", "-c", "torchrun t.py"], "is not a torchrun command line"),
        (["python", "-m", "torch.distributed.launch", "t.py"], "is not a torchrun command line"),
        (["torchrun", "--n", "2", "t.py"], "ambiguous option"),
        (["torchrun", "--nnodes", "2", "--bogus", "t.py"], "unrecognized arguments"),
        (["torchrun", "--nnodes", "two", "t.py"], "--nnodes is not a number"),
        (["torchrun", "--nnodes", "1:4", "t.py"], "needs a fixed number of nodes"),
        (["torchrun"], "required"),
    ],
)
def test_a_line_the_gate_cannot_read_is_refused(argv: list[str], said: str) -> None:
    with pytest.raises(UsageError, match=said):
        torchrun_launch(argv, {})


@pytest.mark.slow
@NEEDS_TORCH
def test_the_options_are_the_installed_torchruns(torch_venvs: dict[str, Path]) -> None:
    """The parser here declares every option torch's own parser has, and no other."""
    python = torch_venvs["a"] / "bin" / "python"
    script = (
        "from torch.distributed.run import get_args_parser\n"
        "print('\\n'.join(s for a in get_args_parser()._actions for s in a.option_strings))"
    )
    out = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True)
    assert set(out.stdout.split()) == option_strings()


@pytest.mark.slow
@NEEDS_TORCH
def test_real_torchrun_forms_with_different_nodes_never_pass(
    torch_venvs: dict[str, Path], tmp_path: Path
) -> None:
    """Node 0 as `python -m torch.distributed.run` with abbreviated options, node 1 as a
    bare `torchrun` told by PET_* variables (Kubeflow): both stop, naming gatepkg."""
    (tmp_path / "train.py").write_text("print('trained')\n", encoding="utf-8")
    port = str(_free_port())
    a, odd = torch_venvs["a"] / "bin", torch_venvs["odd"] / "bin"
    gate = ["gate", "--torchrun", "--timeout", "60", "--"]
    zero = [str(a / "envguard"), *gate, str(a / "python"), "-m", "torch.distributed.run"]
    zero += ["--nnode", "2", "--node_r", "0", "--master_a", "127.0.0.1", "--master_p", port]
    one = [str(odd / "envguard"), *gate, str(odd / "torchrun")]
    pet = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "127.0.0.1"}
    results = _run_both(
        [[*zero, "train.py"], [*one, "train.py"]],
        [{}, {**pet, "PET_MASTER_PORT": port}],
        tmp_path,
        240,
    )
    for result in results:
        assert result.returncode == 1, result.stderr
        assert result.stderr.startswith(
            f"error: environments differ across the job, no majority: node {HERE}[node 0]"
            f" (node rank 0) vs node {HERE}[node 1] (node rank 1): gatepkg 1.0 -> 1.1"
        ), result.stderr
        assert "trained" not in result.stdout


@pytest.mark.slow
@NEEDS_TORCH
def test_real_torchrun_c10d_without_node_rank_passes_and_trains(
    torch_venvs: dict[str, Path], tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.ones(1)\ndist.all_reduce(t)\n"
        "print(f'rank {dist.get_rank()}: all_reduce {t.item():g}', flush=True)\n"
        "dist.destroy_process_group()\n",
        encoding="utf-8",
    )
    endpoint = f"127.0.0.1:{_free_port()}"
    lines = []
    for name in ("a", "same"):
        bin_ = torch_venvs[name] / "bin"
        gate = [str(bin_ / "envguard"), "gate", "--torchrun", "--timeout", "60", "--"]
        rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "j1"]
        lines.append([*gate, str(bin_ / "torchrun"), "--nnodes", "2", *rdzv, str(script)])
    results = _run_both(lines, [{}, {}], tmp_path, 240)
    ranks = set()
    for result in results:
        assert result.returncode == 0, result.stderr
        assert "envguard gate: passed" in result.stderr
        assert "all_reduce 2" in result.stdout, result.stdout + result.stderr
        ranks.add(result.stdout.split(":")[0])
    assert ranks == {"rank 0", "rank 1"}
