"""What the measuring process changed in its own environment since it started
(tools.changed_in_process): read against the environment exec gave it, and what a
snapshot taken in that process records of it (env_at_start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envguard import tools


def test_set_changed_and_unset_names_are_told_and_envguards_own_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launch = tmp_path / "environ"
    # as /proc/self/environ holds it: NUL-separated, odd entries skipped, the first of a
    # name counting (as os.environ reads its start)
    launch.write_bytes(b"\0".join([b"SAME=1", b"CHANGED=a", b"GONE=x", b"=odd", b"NOEQ",
                                   b"SAME=9", b"BYTES=\xff", b""]))  # fmt: skip
    for name in list(os.environ):
        monkeypatch.delenv(name)
    monkeypatch.setenv("SAME", "1")
    monkeypatch.setenv("CHANGED", "b")
    monkeypatch.setenv("NEW", "torch set it")
    monkeypatch.setenv("BYTES", os.fsdecode(b"\xff"))
    monkeypatch.setattr(tools, "_OWN", {"ENVGUARDS_OWN"})
    monkeypatch.setenv("ENVGUARDS_OWN", "1")
    assert tools.changed_in_process(str(launch)) == {"CHANGED": "a", "GONE": "x", "NEW": None}
    assert tools.changed_in_process(str(tmp_path / "no-proc")) is None
    # written over by a process title (setproctitle): not a start to compare with, else
    # every variable would read as the process's own, and a diff would say none of them
    launch.write_bytes(b"ray::TrainWorker.train()" + b"\0" * 40)
    assert tools.changed_in_process(str(launch)) is None
    launch.write_bytes(b"python train.py --lr=0.1" + b"\0" * 40)  # a title with a "="
    assert tools.changed_in_process(str(launch)) is None
    # a process that unset most of what it started with (a launcher's SLURM_*) is told
    for name in list(os.environ):
        monkeypatch.delenv(name)
    monkeypatch.setenv("KEPT", "1")
    launch.write_bytes(b"\0".join([b"KEPT=1", *(b"SLURM_V%d=1" % i for i in range(50))]))
    assert len(tools.changed_in_process(str(launch)) or ()) == 50


@pytest.mark.skipif(not Path(tools.LAUNCH_ENVIRON).exists(), reason="no /proc/self/environ")
def test_a_real_process_tells_what_it_set_after_it_started() -> None:
    code = (
        "import json, os; from envguard.tools import changed_in_process as c; before = c();"
        " os.environ['TORCHINDUCTOR_CACHE_DIR'] = '/tmp/t'; os.environ.pop('HOME', None);"
        " print(json.dumps([before, c()]))"
    )
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": "/nowhere", "LANG": "C.UTF-8"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    before, after = json.loads(done.stdout)
    assert before == {}
    assert after == {"HOME": "/nowhere", "TORCHINDUCTOR_CACHE_DIR": None}


@pytest.mark.skipif(not Path(tools.LAUNCH_ENVIRON).exists(), reason="no /proc/self/environ")
def test_a_torchrun_worker_starts_where_its_agent_started(tmp_path: Path) -> None:
    """torchrun's agent sets TORCHELASTIC_*, OMP_NUM_THREADS=1 in its own process, then
    starts the workers: in a worker those are the run's own doing (a relaunch through
    torchrun sets them again), so its start is the agent's. Here a stand-in agent, a
    script named torchrun; a parent that is not one leaves the worker's own start."""
    worker = (
        "import json; from envguard.tools import changed_in_process as c; print(json.dumps(c()))"
    )
    agent = (
        "import os, subprocess, sys; os.environ['OMP_NUM_THREADS'] = '1';"
        " os.environ['TORCHELASTIC_RUN_ID'] = 'r1';"
        f" subprocess.run([sys.executable, '-c', {worker!r}], check=True)"
    )
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8", "HOME": "/h"}
    for name, told in (("torchrun", {"OMP_NUM_THREADS": None, "TORCHELASTIC_RUN_ID": None}),
                       ("launcher", {})):  # fmt: skip
        script = tmp_path / name
        script.write_text(agent)
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, env=env, check=True
        )
        assert json.loads(done.stdout) == told, name
