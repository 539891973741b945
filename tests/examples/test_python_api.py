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


def test_training_script_snapshots_itself_and_feeds_a_tracker(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
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


def test_api_raises_envguard_errors_and_never_exits(tmp_path: Path) -> None:
    with pytest.raises(envguard.EnvguardError) as info:
        envguard.load(tmp_path / "missing.json")
    assert info.value.exit_code == 2 and "no such snapshot" in info.value.message
    with pytest.raises(envguard.EnvguardError, match="not a section"):
        envguard.load_policy(only=["nope"])
