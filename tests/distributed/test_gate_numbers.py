"""The gate's own numbers and needs, said in one line before it waits for anyone:
`--timeout inf`, `1e309`, `nan`, `-1` (also as ENVGUARD_GATE_TIMEOUT), and a Python that
cannot import torch.distributed (envguard in a venv of its own)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

RANKS = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "9"}


def _gate(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    envguard = str(Path(sys.executable).parent / "envguard")
    return subprocess.run(
        [envguard, "gate", *args],
        env={**os.environ, **RANKS, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("value", ["inf", "1e309", "nan", "-1", "2e6"])
def test_a_wait_that_is_no_number_of_seconds_is_refused_in_one_line(value: str) -> None:
    """Refused before anyone is waited for: by the option's bounded reader (cli/numbers)
    or the gate's own bound (at most 1e6 s), and the variable alike; never a traceback."""
    done = _gate("--timeout", value)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "--timeout" in done.stderr
    by_variable = _gate(ENVGUARD_GATE_TIMEOUT=value)
    assert by_variable.returncode == 2 and "Traceback" not in by_variable.stderr
    assert by_variable.stderr.startswith("error: ENVGUARD_GATE_TIMEOUT")
    assert by_variable.stderr.count("\n") == 1, by_variable.stderr


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is here")
def test_a_python_without_torch_says_so_in_one_line() -> None:
    done = _gate("--timeout", "5")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(
        "error: the gate meets the other ranks through torch.distributed, which this Python"
    )
    assert "hint: run the gate with the job's own Python" in done.stderr
