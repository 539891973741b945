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


def test_through_via_a_planted_interpreter_is_checked_there_and_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--via without --python: the far side's own python3 inspects the snapshot's
    interpreter first (`env` as the prefix: the far side is this machine)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    shared = tmp_path / "shared"
    ran = tmp_path / "ran"
    script = planted(shared / "bin", ran)
    shared.chmod(0o777)
    data = json.loads(store.dumps(snapshot([package("ok", "1")])))
    data["interpreter"]["executable"] = str(script)
    Path("hostile.json").write_text(json.dumps(data))
    for args in (
        ["diff", "hostile.json", "--via", "env"],
        ["check", "hostile.json", "--via", "env"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "a folder anyone can write to" in result.stderr and "there; not run" in result.stderr
    assert not ran.exists(), "a planted interpreter ran through --via"
    shared.chmod(0o755)  # the same path, safe now: it is run (and is no python: one line)
    result = runner.invoke(app, ["diff", "hostile.json", "--via", "env"])
    assert ran.exists() and "Traceback" not in result.output


def test_a_far_side_that_never_answers_does_not_stall_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envguard.snapshots import live

    monkeypatch.setattr(live, "VIA_TIMEOUT", 2.0)
    monkeypatch.chdir(tmp_path)
    slow = tmp_path / "slow.sh"
    slow.write_text("#!/bin/sh\nexec sleep 1000\n")
    slow.chmod(0o755)
    Path("good.json").write_text(store.dumps(snapshot([package("ok", "1")])))
    for python in ([], ["--python", "/usr/bin/python3"]):  # the check there, and the probe
        result = runner.invoke(app, ["check", "good.json", "--via", str(slow), *python])
        assert result.exit_code in (1, 2) and "within 2s" in result.stderr, result.output
