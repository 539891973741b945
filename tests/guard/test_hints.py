"""Every hint is safe to follow and complete: run as printed, none stashes, deletes or moves
snapshots/ or the undo history; an undo with nothing to undo names the way back; a preview
names every package it removes."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import envguard
from envguard.cli import app
from envguard.compare.engine import diff, restore_hints
from envguard.guard import journal
from factories import UV, git, make_git_repo, make_venv, run, uv_install

runner = CliRunner()


def _command_in(hint: str) -> list[str]:
    """The command a hint tells the user to run (after its last ': '), as the shell would
    split it."""
    return shlex.split(hint.rsplit(": ", 1)[1])


def test_the_hint_for_a_dirty_repo_keeps_snapshots_and_the_undo_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Undo and rebuild say how to set a dirty repo's changes aside. Followed as printed,
    the edits are set aside, and snapshots/ (a new snapshot, an edited tracked one) and the
    guard's history beside a venv in the work tree are all still there, as they were."""
    repo = make_git_repo(
        tmp_path / "train",
        {"train.py": "lr = 1\n", "snapshots/old.json": "{}\n", ".gitignore": ".venv/\n"},
    )
    monkeypatch.chdir(repo)
    venv = repo / ".venv"
    make_venv(venv)
    good = envguard.snapshot(python=venv, name="good", repos=[repo])
    envguard.save(good, "snapshots/good.json")
    entry = journal.begin(venv, "{}", command=("pip", "install", "six"), allowed=(), planned="x")
    (repo / "train.py").write_text("lr = 99\n")  # the incident: an edit in the work tree
    (repo / "snapshots" / "old.json").write_text('{"kept": true}\n')
    live = envguard.snapshot(python=venv, name="now", repos=[repo])
    hints = [h for h in restore_hints(diff(good, live).changes, good) if "stash" in h]
    assert len(hints) == 1, hints

    done = subprocess.run(_command_in(hints[0]), capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert (repo / "train.py").read_text() == "lr = 1\n"  # set aside
    assert envguard.load("snapshots/good.json").name == "good"
    assert (repo / "snapshots" / "old.json").read_text() == '{"kept": true}\n'
    assert journal.records(venv) == [entry]
    assert (journal.folder(venv) / entry.snapshot_name).is_file()
    # Everything else that made the repo dirty is set aside.
    assert git(repo, "status", "--porcelain", "-uno") == "M snapshots/old.json"


def test_the_undo_history_is_invisible_to_git(tmp_path: Path) -> None:
    """A venv kept inside a work tree: its history is ignored by git, so `git stash -u`,
    `git add -A` or `git clean -fd` run by anyone leave it alone."""
    repo = make_git_repo(tmp_path / "train")
    venv = repo / "venv"
    make_venv(venv)
    journal.begin(venv, "{}", command=("pip", "install", "six"), allowed=(), planned="x")
    untracked = git(repo, "ls-files", "--others", "--exclude-standard").split()
    assert not [p for p in untracked if journal.MARK in p]
    git(repo, "clean", "-fdq")
    assert len(journal.records(venv)) == 1


def test_undo_with_nothing_guarded_names_restore(tmp_path: Path) -> None:
    """After an install nobody guarded, there is nothing to undo: the hint says what brings
    the venv back instead."""
    venv = tmp_path / ".venv"
    make_venv(venv)
    result = runner.invoke(app, ["undo", "--venv", str(venv)])
    assert result.exit_code == 2
    error, hint = result.stderr.splitlines()
    assert error == f"error: nothing to undo: {venv} has no guarded change recorded"
    assert hint.startswith(f"hint: envguard restore SNAPSHOT --venv {venv} ")


def test_a_damaged_record_is_never_deleted_by_the_hint(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    journal.begin(venv, "{}", command=("pip", "install", "six"), allowed=(), planned="x")
    record = journal.folder(venv) / "0001.record.json"
    record.write_text('{"schema_version": 2}')  # a newer envguard's, perhaps
    result = runner.invoke(app, ["history", "--venv", str(venv)])
    assert result.exit_code == 2
    hint = result.stderr.splitlines()[1]
    assert "delete" not in hint and "rm " not in hint
    assert f"envguard restore {journal.folder(venv) / '0001.json'} --venv" in hint
    assert record.is_file()


@pytest.fixture
def six_added_since_the_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A venv whose newest snapshot predates six: six is in the venv, not in the snapshot."""
    from envguard.testing import make_wheel

    wh = tmp_path / "wh"
    make_wheel(wh, "six", "1.17.0")
    make_wheel(wh, "numpy", "2.1.0")
    venv = tmp_path / ".venv"
    make_venv(venv)
    uv_install(venv, wh, "numpy==2.1.0")
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["snapshot", "--python", str(venv), "--name", "good"]).exit_code == 0
    uv_install(venv, wh, "six")
    return venv


@pytest.mark.parametrize(
    ("command", "headline"),
    [
        (["uninstall", "six"], "this uninstall would remove six 1.17.0 (against snapshot good)"),
        (
            ["uninstall", "six", "numpy"],
            "this uninstall would remove numpy 2.1.0, six 1.17.0 (against snapshot good)",
        ),
    ],
)
def test_a_preview_names_every_package_it_removes(
    six_added_since_the_snapshot: Path, command: list[str], headline: str
) -> None:
    """Against a snapshot that never had six, removing six is no drift from it: the preview
    still says six goes (it said "would change no package")."""
    venv = six_added_since_the_snapshot
    # Named: with none, guard judges against the venv as it is (never the newest file).
    result = runner.invoke(
        app, ["guard", "--venv", str(venv), "--preview", "good", "--", UV, "pip", *command]
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == headline
    assert "leaves alone" not in result.stderr  # six is the install's own change
    assert "six==1.17.0" in run([UV, "pip", "freeze", "--python", str(venv)]).stdout


def test_an_upgrade_is_not_called_a_removal() -> None:
    from envguard.guard.resolve import Planned, Resolution

    upgrade = Resolution(
        removed={"numpy": "1.26.4", "six": "1.16.0"},
        installed=(Planned(name="numpy", version="2.1.0"),),
    )
    assert upgrade.removals() == {"six": "1.16.0"}


def test_the_hint_command_parser_reads_a_real_hint() -> None:
    assert _command_in("x; to set them aside (y): git -C 'a b' stash push -- . ':(exclude)s'") == [
        "git",
        "-C",
        "a b",
        "stash",
        "push",
        "--",
        ".",
        ":(exclude)s",
    ]
