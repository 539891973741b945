"""The README's Python API example runs as a training script would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import envguard

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python-api" / "train.py"


def _shell_env() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "TORCHINDUCTOR_CACHE_DIR")
    }


def test_training_script_snapshots_itself_and_feeds_a_tracker(tmp_path: Path) -> None:
    env = _shell_env()
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    snap = envguard.load(tmp_path / "run" / "envguard-snapshot.json")
    assert snap.metrics["loss"] == 1.92 and isinstance(snap.metrics["tok_s"], int)
    assert any(p.name == "pydantic" for p in snap.packages)  # envguard's own venv
    config = json.loads((tmp_path / "run" / "tracker" / "config.json").read_text())
    assert config["envguard/packages"] == sum(not p.shadowed for p in snap.packages)
    assert "drift since: 0 changes" in proc.stdout


def test_what_the_script_set_in_its_process_is_no_drift_from_a_shell(tmp_path: Path) -> None:
    """The script's snapshot inherits what it (torch.compile, here a stand-in) set in its
    own process after it started; a diff from a shell, where that is not set, must not
    fail the relaunch it guards: said at info, naming why (it warned, exit 1)."""
    env = _shell_env()
    ran = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path / "run")],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    path = tmp_path / "run" / "envguard-snapshot.json"
    snap = envguard.load(path)
    assert "TORCHINDUCTOR_CACHE_DIR" in snap.env
    assert snap.env_at_start is not None
    assert snap.env_at_start["TORCHINDUCTOR_CACHE_DIR"] is None  # not set when it started
    argv = [sys.executable, "-m", "envguard", "diff", str(path), "--python", sys.executable]
    shell = subprocess.run(
        [*argv, "--format", "json"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert shell.returncode == 0, shell.stdout + shell.stderr
    said = {c["name"]: c for c in json.loads(shell.stdout)["changes"]}
    change = said["TORCHINDUCTOR_CACHE_DIR"]
    assert (
        change["severity"] == "info" and "changed it itself after it started" in change["message"]
    )
    # The command line's own snapshot: none of the user's variables changed in its process.
    cli = tmp_path / "cli.json"
    taken = subprocess.run(
        [*argv[:3], "snapshot", "--python", sys.executable, "-o", str(cli)],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert taken.returncode == 0, taken.stderr
    assert json.loads(cli.read_text())["env_at_start"] == {}


def test_api_raises_envguard_errors_and_never_exits(tmp_path: Path) -> None:
    with pytest.raises(envguard.EnvguardError) as info:
        envguard.load(tmp_path / "missing.json")
    assert info.value.exit_code == 2 and "no such snapshot" in info.value.message
    with pytest.raises(envguard.EnvguardError, match="not a section"):
        envguard.load_policy(only=["nope"])
