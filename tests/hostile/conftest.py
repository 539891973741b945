"""Fixtures shared by the hostile tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from envguard.snapshots import store
from factories import package, snapshot


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git work tree two folders below tmp_path holding ``good.json`` (test_restore.py has a
    ``project`` of its own)."""
    work = tmp_path / "outer" / "project"
    work.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "good.json").write_text(store.dumps(snapshot([package("ok", "1")])))
    return work
