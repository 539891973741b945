"""examples/seed-story replays the motivating case end to end; it must keep working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

STORY = Path(__file__).resolve().parents[2] / "examples" / "seed-story" / "story.py"


@pytest.mark.slow
def test_seed_story_runs_offline_and_ends_clean() -> None:
    proc = subprocess.run(
        [sys.executable, str(STORY)], capture_output=True, text=True, timeout=300, check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "torch 2.11.0+cu128 -> 2.11.0+cu130" in out
    assert "sglang 0.4.0 added" in out and "is cold" in out
    assert "warm-up: compiled 8 graphs" in out
    assert "bisect good -> " in out and "it is: sglang added (0.4.0)" in out
    assert "the first bad commit: " in out and "overlap the all-reduce (the race)" in out
    # one restore put back the model script (hash printed) and the cache, here and in the
    # container, whose checkout lies at another path
    # (each row named by the path it writes: relative here, absolute in the container)
    assert out.count("file code/model.py") >= 2 and "container/code/model.py  " in out
    assert "restored  cache inductor cache" in out
    assert "on --via" in out and "rebuilt (no venv there yet)" in out
    assert "no drift: the environment matches good" in out
    assert "drift from good: 1 info" in out  # the container's venv lives at another path
    assert out.rstrip().endswith("any remaining failure is in the code, not the environment")
