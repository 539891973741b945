"""An interpreter named by a snapshot never runs from a place someone else could fill, and
never before the snapshot validated."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.snapshots import store
from factories import package, snapshot

runner = CliRunner()


def planted(folder: Path, ran: Path) -> Path:
    folder.mkdir(parents=True)
    script = folder / "python3"
    script.write_text(f"#!/bin/sh\ntouch {ran}\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"schema_version": 99},
        {"packages": "not-a-list"},
    ],
)
def test_planted_interpreter_in_a_world_writable_folder_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changes: dict[str, object]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    shared = tmp_path / "shared"
    ran = tmp_path / "ran"
    script = planted(shared / "bin", ran)
    shared.chmod(0o777)  # anyone can write here, no sticky bit
    data = json.loads(store.dumps(snapshot([package("ok", "1")])))
    data["interpreter"]["executable"] = str(script)
    data.update(changes)
    Path("hostile.json").write_text(json.dumps(data))
    for args in (["diff", "hostile.json"], ["check", "hostile.json"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert len(result.stderr.strip().splitlines()) <= 2  # error: and hint:
    assert not ran.exists(), "a planted interpreter ran"


def test_an_interpreter_inside_the_snapshots_own_checkout_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot's checkout is not the cwd: `envguard diff /ci/pr/snapshots/x.json` run
    from elsewhere must not run /ci/pr/tools/python3."""
    checkout = tmp_path / "pr"
    checkout.mkdir()
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    ran = tmp_path / "ran"
    script = planted(checkout / "tools", ran)
    data = json.loads(store.dumps(snapshot([package("ok", "1")])))
    data["interpreter"]["executable"] = str(script)
    (checkout / "snapshots").mkdir()
    (checkout / "snapshots" / "x.json").write_text(json.dumps(data))
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    for args in (
        ["diff", str(checkout / "snapshots" / "x.json")],
        ["check", str(checkout / "snapshots" / "x.json")],
    ):
        result = runner.invoke(app, args)
        assert not ran.exists(), f"{args}: a planted interpreter ran"
        assert result.exit_code == 2 and "inside this checkout" in result.stderr
