"""Envguard's own folders (a venv's history, snapshots/, the content store, a rebuild's
plan folder) are opened, never followed: a symlink to a folder outside, a dangling link
and a plain file in their place are each one `error:` line, exit 2, and nothing is written
through the link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.errors import UsageError
from envguard.guard import journal
from envguard.owned import own_folder
from envguard.snapshots import store
from envguard.snapshots.blobs import Blobs
from factories import make_venv, snapshot

runner = CliRunner()


def _plant(place: Path, kind: str, outside: Path) -> None:
    """``place`` made a link to ``outside`` (a folder), a dangling link, or a file."""
    if kind == "link":
        outside.mkdir(exist_ok=True)
        place.symlink_to(outside)
    elif kind == "dangling":
        place.symlink_to(outside / "gone")
    else:
        place.write_text("not a folder\n")


WHAT = {
    "link": "a symbolic link (to ",
    "dangling": "a dangling symbolic link (to ",
    "file": "a file, not a folder",
}
KINDS = sorted(WHAT)


@pytest.mark.parametrize("kind", KINDS)
def test_own_folder_names_what_is_there_instead(tmp_path: Path, kind: str) -> None:
    place = tmp_path / "mine"
    _plant(place, kind, tmp_path / "outside")
    with pytest.raises(UsageError) as raised:
        own_folder(place, create=True)
    assert raised.value.message.startswith(f"{place}: {WHAT[kind]}")
    assert not (tmp_path / "outside" / "gone").exists()
    if kind == "link":
        assert list((tmp_path / "outside").iterdir()) == []


def test_own_folder_makes_an_absent_one_and_passes_a_real_one(tmp_path: Path) -> None:
    assert own_folder(tmp_path / "new", create=False) is None
    assert own_folder(tmp_path / "new", create=True) == tmp_path / "new"
    assert (tmp_path / "new").is_dir() and not (tmp_path / "new").is_symlink()
    assert own_folder(tmp_path / "new", create=False) == tmp_path / "new"


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_history_folder_stops_guard_before_the_install_and_undo(
    tmp_path: Path, kind: str
) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    outside = tmp_path / "outside"
    _plant(journal.folder(venv), kind, outside)
    # uv never runs: the check comes before it (an install here would fail: no index)
    for argv in (
        ["history", "--venv", str(venv)],
        ["undo", "--venv", str(venv)],
    ):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, (argv, result.stderr)
        first = result.stderr.splitlines()[0]
        assert first == f"error: {journal.folder(venv)}: " + first.split(": ", 2)[2]
        assert WHAT[kind] in first
        assert "Traceback" not in result.stderr
    with pytest.raises(UsageError):
        journal.begin(venv, "{}", command=("pip", "install", "six"), allowed=(), planned="x")
    if kind == "link":
        assert list(outside.iterdir()) == []  # nothing written through the link


def test_guard_installs_nothing_when_its_history_folder_is_a_link(tmp_path: Path) -> None:
    from envguard.testing import make_wheel
    from factories import UV, uv_freeze

    venv = tmp_path / ".venv"
    make_venv(venv)
    wh = tmp_path / "wh"
    make_wheel(wh, "six", "1.17.0")
    outside = tmp_path / "outside"
    _plant(journal.folder(venv), "link", outside)
    install = [UV, "pip", "install", "--no-index", "--find-links", str(wh), "six"]
    result = runner.invoke(app, ["guard", "--venv", str(venv), "--", *install])
    assert result.exit_code == 2, result.stderr
    assert f"error: {journal.folder(venv)}: a symbolic link (to {outside})" in result.stderr
    assert ("six", "1.17.0") not in uv_freeze(venv)
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_snapshot_folder_is_never_written_or_read_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.chdir(tmp_path)
    outside = tmp_path / "outside"
    _plant(tmp_path / store.SNAPSHOT_DIR, kind, outside)
    if kind == "link":
        (outside / "good.json").write_text(store.dumps(snapshot(name="good")))
    from envguard.api.capture import save

    with pytest.raises(UsageError) as raised:
        save(snapshot(name="mine"))
    assert WHAT[kind] in raised.value.message
    with pytest.raises(UsageError):
        store.resolve("good")  # by name: not read through the link either
    with pytest.raises(UsageError):
        store.list_snapshots()
    if kind == "link":
        assert sorted(p.name for p in outside.iterdir()) == ["good.json"]
    result = runner.invoke(app, ["show", "good"])
    assert result.exit_code == 2 and WHAT[kind] in result.stderr


@pytest.mark.parametrize("level", [".store", ".store/sha256"])
def test_the_content_store_is_never_written_through_a_link(tmp_path: Path, level: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "snapshots" / ".store"
    place = tmp_path / "snapshots" / level
    place.parent.mkdir(parents=True, exist_ok=True)
    place.symlink_to(outside)
    with pytest.raises(UsageError) as raised:
        Blobs(root).add_bytes(b"kept")
    assert "a symbolic link (to " in raised.value.message
    assert list(outside.iterdir()) == []


def test_a_rebuilds_plan_folder_planted_as_a_link_is_refused(tmp_path: Path) -> None:
    """The plan folder's name is predictable (pid and host): a link planted there would
    take the requirement files."""
    from envguard.recovery.execute import PLAN_MARK, _run_steps

    venv = tmp_path / "venv"
    outside = tmp_path / "outside"
    outside.mkdir()
    plan_dir = tmp_path / f".venv{PLAN_MARK}{os.getpid()}@host"
    plan_dir.symlink_to(outside)
    from envguard.recovery.plan import Plan, PlanFile

    plan = Plan(
        snapshot="s",
        venv=str(venv),
        build=None,
        in_place=True,
        python=str(venv / "bin" / "python"),
        files=(PlanFile(path=str(plan_dir / "requirements.txt"), content="six\n"),),
        steps=(),
        packages=0,
    )
    with pytest.raises(UsageError):
        _run_steps(plan, snapshot(), None, frozenset(), lambda _: None, None, None, None)  # type: ignore[arg-type]
    assert list(outside.iterdir()) == []
