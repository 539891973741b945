"""The package as a user's tools see it: typed (PEP 561), licensed, its floors declared."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import envguard


def test_a_script_using_the_api_type_checks_strictly(tmp_path: Path) -> None:
    """py.typed ships with the package: mypy --strict reads envguard's own types instead of
    failing the user's script with import-untyped."""
    if shutil.which("mypy", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("mypy is in the dev extra")
    script = tmp_path / "gate.py"
    script.write_text(
        "import envguard\n"
        "from envguard.api import RestoreOptions\n\n"
        "def worst(good: str) -> str | None:\n"
        "    drift = envguard.diff(good)\n"
        "    options = RestoreOptions(venv='.venv')\n"
        "    return None if drift.max_severity is None else drift.max_severity.value\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(script)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
    assert (Path(envguard.__file__).parent / "py.typed").is_file()


def test_the_metadata_declares_the_real_typer_floor_and_the_licence() -> None:
    meta = importlib.metadata.metadata("envguard-ml")
    typer = [r for r in meta.get_all("Requires-Dist") or [] if r.startswith("typer")]
    assert typer and ">=0.20" in typer[0]  # 0.19 lacks Typer.suggest_commands
    assert meta["License-Expression"] == "MIT"
