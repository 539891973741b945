"""`envguard fleet`: the pure N-way comparison, and the Slurm recipe with a stand-in srun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from envguard.cli import app
from envguard.compare.fleet import compare
from envguard.snapshots import store
from envguard.snapshots.models import Accelerator
from factories import package, snapshot

runner = CliRunner()
RECIPES = Path(__file__).resolve().parents[2] / "examples" / "fleet"


def node(
    torch: str = "2.11.0+cu128",
    nccl: str = "2.21.5",
    driver: str = "570.86.15",
    gpus: int = 8,
    **env: str,
) -> object:
    return snapshot(
        [package("torch", torch), package("nvidia-nccl-cu12", nccl), package("numpy", "1.26.4")],
        accelerator=Accelerator(
            present=True, driver=driver, gpus=("NVIDIA H200",) * gpus, count=gpus
        ),
        env=env,
    )


def test_majority_and_odd_one_out() -> None:
    fleet = {f"gpu{i:02}": node() for i in range(1, 8)}
    fleet["gpu05"] = node(nccl="2.27.3")
    fleet["gpu07"] = node(gpus=7)
    report = compare(fleet)  # type: ignore[arg-type]
    assert report.odd_hosts == ("gpu05", "gpu07")
    assert [len(g.hosts) for g in report.groups] == [5, 1, 1]
    by_item = {d.item: d for d in report.differences}
    nccl = by_item["package nvidia-nccl-cu12"].values
    assert (nccl[0].value, nccl[0].odd, nccl[1].hosts, nccl[1].odd) == (
        "2.21.5",
        False,
        ("gpu05",),
        True,
    )
    assert "gpus" in by_item and "driver" not in by_item


def test_a_lone_surrogate_in_a_value_is_compared_not_a_traceback() -> None:
    """A snapshot file may hold "\\ud800" (JSON's escape for a lone surrogate) in a GPU name
    or an env value: the hosts are grouped like any others."""
    odd = snapshot([package("torch", "2.11.0+cu128")], env={"NCCL_X": "a\ud800"})
    report = compare({"a": node(), "b": node(), "c": odd})  # type: ignore[dict-item]
    assert report.odd_hosts == ("c",)


def test_baseline_marks_every_host_that_differs_from_it() -> None:
    fleet = {"a": node(torch="2.11.0+cu130"), "b": node(torch="2.11.0+cu130"), "c": node()}
    report = compare(fleet, baseline=node())  # type: ignore[arg-type]
    assert report.odd_hosts == ("a", "b")
    assert compare({"a": node(), "b": node()}).agree  # type: ignore[dict-item]


def test_env_difference_and_tie_marks_both_sides() -> None:
    report = compare({"a": node(NCCL_ALGO="Ring"), "b": node(NCCL_ALGO="Tree")})  # type: ignore[dict-item]
    assert report.odd_hosts == ("a", "b")
    assert report.differences[0].item == "env NCCL_ALGO"


def test_fleet_cli_formats_and_errors(in_tmp: Path) -> None:
    folder = in_tmp / "run"
    folder.mkdir()
    for host, snap in {"n1": node(), "n2": node(), "n3": node(driver="550.54.15")}.items():
        (folder / f"{host}.json").write_text(store.dumps(snap))  # type: ignore[arg-type]
    result = runner.invoke(app, ["fleet", str(folder)])
    assert result.exit_code == 1 and "odd ones out: n3" in result.stdout
    result = runner.invoke(app, ["fleet", str(folder), "--format", "markdown"])
    assert "| driver | 550.54.15 | n3 | odd one out |" in result.stdout
    (folder / "broken.json").write_text("{")  # a node cut off: a row, not a refusal
    result = runner.invoke(app, ["fleet", str(folder), "--format", "json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["failed"] == [
        {"host": "broken", "reason": "not a report (JSON cut off after 1 bytes)"}
    ]
    result = runner.invoke(app, ["fleet", str(in_tmp / "empty")])
    assert result.exit_code == 2


def test_slurm_recipe_with_a_stand_in_srun(
    tmp_path: Path, venv_factory: Callable[..., Path], in_tmp: Path
) -> None:
    """srun runs the recipe's command once per node; each node differs only where we say."""
    nodes = {
        "node1": ["torch==2.11.0+cu128"],
        "node2": ["torch==2.11.0+cu128"],
        "node3": ["torch==2.11.0+cu130"],
    }
    bins = {}
    for name, reqs in nodes.items():
        venv = venv_factory(f"venv-{name}", *reqs)
        bindir = tmp_path / f"bin-{name}"
        bindir.mkdir()
        (bindir / "hostname").write_text(f"#!/bin/sh\necho {name}\n")
        (bindir / "hostname").chmod(0o755)
        bins[name] = (bindir, venv)
    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    lines = ["#!/usr/bin/env bash", "while [[ $1 == --* ]]; do shift; done"]
    for bindir, venv in bins.values():
        lines.append(f'PATH="{bindir}:$PATH" VIRTUAL_ENV="{venv}" "$@" || exit $?')
    srun.write_text("\n".join(lines) + "\n")
    srun.chmod(0o755)
    env = {
        **os.environ,
        "SLURM_JOB_ID": "42",
        "PATH": f"{srun.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    proc = subprocess.run(
        ["bash", str(RECIPES / "slurm.sbatch")],
        cwd=in_tmp,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # fleet: the nodes disagree
    out = in_tmp / "snapshots" / "fleet-42"
    assert sorted(p.stem for p in out.glob("*.json")) == ["node1", "node2", "node3"]
    assert "odd ones out: node3" in proc.stdout
    report = json.loads(runner.invoke(app, ["fleet", str(out), "--format", "json"]).stdout)
    assert report["odd_hosts"] == ["node3"]
