"""Helpers shared by the hostile tests: snapshot pairs to diff, envguard as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from envguard.cli import app
from envguard.snapshots import store
from envguard.snapshots.models import Package
from factories import package, snapshot

runner = CliRunner()


def write_json(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


def pkg(name: str, version: str = "1.0", requires: tuple[str, ...] = ()) -> Package:
    return Package.model_validate({**package(name, version).model_dump(), "requires": requires})


def pair(tmp_path: Path, good: list[Package], bad: list[Package]) -> tuple[str, str]:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(store.dumps(snapshot(good, name="a")))
    b.write_text(store.dumps(snapshot(bad, name="b")))
    return str(a), str(b)


def diff(a: str, b: str, *args: str) -> Any:
    return runner.invoke(app, ["diff", a, "--against", b, *args], env={"COLUMNS": "300"})


def envguard(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envguard", *args],
        cwd=cwd, capture_output=True, text=True, timeout=120, env={**os.environ, **env},
    )  # fmt: skip
