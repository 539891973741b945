"""`envguard guard -- uv add|remove|sync`: the preview runs `uv add --no-sync` in the real
project, so every file uv writes there must come back as it was (links followed, workspace
members, in place), whatever stops it; and what uv would not sync is not previewed."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.guard.project import kept_as_they_are
from envguard.lifecycle import Interrupted, signals_handled
from factories import UV, make_venv, run

runner = CliRunner()


def guard(venv: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["guard", "--venv", str(venv), *args])
    return result.exit_code, result.stdout, result.stderr


def _any_torch() -> None:
    """Any torch from 2.13 on: the lock's 2.13.0+cpu still fits, sglang's 2.14.1 too."""
    manifest = Path("pyproject.toml")
    manifest.write_text(manifest.read_text().replace("torch>=2.13,<2.14", "torch>=2.13"))


def test_a_linked_pyproject_and_lock_are_put_back_through_the_link(
    project: tuple[Path, Path],
) -> None:
    """uv writes through a symlinked pyproject.toml and uv.lock: their targets come back."""
    venv, _ = project
    _any_torch()
    real = Path("real")
    real.mkdir()
    for name in ("pyproject.toml", "uv.lock"):
        Path(name).rename(real / name)
        Path(name).symlink_to(real / name)
    files = {name: (real / name).read_bytes() for name in ("pyproject.toml", "uv.lock")}
    code, out, err = guard(venv, "--", UV, "add", "sglang")
    assert code == 1, err
    assert out.startswith("this add would change torch"), out
    assert {name: (real / name).read_bytes() for name in files} == files
    assert Path("pyproject.toml").is_symlink() and Path("uv.lock").is_symlink()


def test_uv_add_to_another_workspace_member_puts_its_pyproject_back(
    project: tuple[Path, Path],
) -> None:
    """`--package b` from the workspace root writes packages/b/pyproject.toml: not a folder
    above the current one, a member the root declares."""
    venv, _ = project
    manifest = Path("pyproject.toml")
    manifest.write_text(manifest.read_text() + '[tool.uv.workspace]\nmembers = ["packages/*"]\n')
    member = Path("packages", "b", "pyproject.toml")
    member.parent.mkdir(parents=True)
    member.write_text('[project]\nname = "b"\nversion = "0.1.0"\ndependencies = []\n')
    run([UV, "lock", "--quiet"])
    before = {p: p.read_bytes() for p in (manifest, member, Path("uv.lock"))}
    code, out, err = guard(venv, "--preview", "--", UV, "add", "--package", "b", "six")
    assert code == 0, err
    assert out.startswith("this add would"), out
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.parametrize(
    ("args", "variable"),
    [(["--no-sync"], None), (["--frozen"], None), ([], "UV_FROZEN"), ([], "UV_NO_SYNC")],
)
def test_uv_add_that_does_not_sync_changes_no_package(
    project: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    variable: str | None,
) -> None:
    """uv add --no-sync (--frozen, UV_FROZEN=1, UV_NO_SYNC=1) leaves the environment alone:
    previewed as such, not refused for passing --no-sync twice or beside --frozen."""
    venv, _ = project
    if variable is not None:
        monkeypatch.setenv(variable, "1")
    before = {name: Path(name).read_bytes() for name in ("pyproject.toml", "uv.lock")}
    code, out, err = guard(venv, "--preview", "--", UV, "add", *args, "six")
    assert code == 0, err
    assert out.startswith("this add would change no package"), out
    assert {name: Path(name).read_bytes() for name in before} == before


@pytest.mark.parametrize("variable", ["UV_PROJECT", "UV_WORKING_DIR"])
def test_a_variable_pointing_uv_at_another_project_is_refused(
    project: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
) -> None:
    """The preview holds the files of the folder it runs in: uv sent to another project by
    a variable would edit that one's for good."""
    venv, _ = project
    other = tmp_path / "other"
    other.mkdir()
    manifest = other / "pyproject.toml"
    manifest.write_text('[project]\nname = "other"\nversion = "0.1.0"\ndependencies = []\n')
    monkeypatch.setenv(variable, str(other))
    code, _, err = guard(venv, "--preview", "--", UV, "add", "six")
    assert code == 2
    assert f"error: {variable} is set" in err
    assert manifest.read_text().endswith("dependencies = []\n")
    assert sorted(p.name for p in other.iterdir()) == ["pyproject.toml"]


def _fake_uv(tmp_path: Path, script: str) -> Path:
    fake = tmp_path / "fakebin" / "uv"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    return fake


def test_the_project_files_are_put_back_in_place(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    """As uv writes them: the same file (its owner, a hard link to it), not a new one."""
    venv, _ = project
    manifest = Path("pyproject.toml")
    linked = tmp_path / "linked.toml"
    os.link(manifest, linked)
    text, inode = manifest.read_text(), manifest.stat().st_ino
    fake = _fake_uv(tmp_path, "echo 'dependencies = [broken' > pyproject.toml\nexit 1\n")
    code, _, err = guard(venv, "--", str(fake), "add", "six")
    assert code == 2, err
    assert manifest.stat().st_ino == inode
    assert linked.read_text() == text


def test_a_project_file_too_large_to_hold_is_refused_before_uv_runs(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    venv, _ = project
    with open("uv.lock", "r+b") as fh:
        fh.truncate((64 << 20) + 1)
    mark = tmp_path / "ran"
    fake = _fake_uv(tmp_path, f"touch {mark}\n")
    code, _, err = guard(venv, "--", str(fake), "add", "six")
    assert code == 2
    assert err.startswith("error: ") and "uv.lock: cannot hold it to put it back" in err
    assert "Traceback" not in err and not mark.exists()


def test_a_project_file_that_cannot_be_put_back_is_said_and_saved(
    project: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    venv, _ = project
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the saved copy goes with the test
    text = Path("pyproject.toml").read_bytes()
    fake = _fake_uv(tmp_path, "rm pyproject.toml && mkdir pyproject.toml\nexit 1\n")
    code, _, err = guard(venv, "--", str(fake), "add", "six")
    assert code == 1, err
    assert "the preview could not put back" in err and "pyproject.toml" in err
    saved = Path(err.split("content before the preview is in ")[1].split()[0])
    assert [p.read_bytes() for p in saved.iterdir()] == [text]
    assert saved.parent == tmp_path


def test_a_second_signal_does_not_stop_the_putting_back(tmp_path: Path) -> None:
    """Ctrl-C pressed again while the files are put back: every file comes back first."""
    import envguard.guard.project as project

    files = [tmp_path / "pyproject.toml", tmp_path / "uv.lock"]
    for path in files:
        path.write_text("as it was\n")
    put_back = project._put_back
    calls = []

    def interrupted_after_the_first(path: Path, was: project._Held | None) -> bool:
        done = put_back(path, was)
        calls.append(path)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return done

    with (
        pytest.MonkeyPatch.context() as patch,
        signals_handled(),
        pytest.raises(Interrupted),
    ):
        patch.setattr(project, "_put_back", interrupted_after_the_first)
        with kept_as_they_are(files):
            for path in files:
                path.write_text("edited\n")
    assert [p.read_text() for p in files] == ["as it was\n"] * 2


@pytest.mark.usefixtures("project")
def test_the_users_project_environment_is_the_one_previewed_and_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """UV_PROJECT_ENVIRONMENT names the venv `uv sync` changes: the guard previews that
    one, not the project's .venv."""
    other = tmp_path / "elsewhere"
    make_venv(other)
    monkeypatch.setenv("UV_PROJECT_ENVIRONMENT", str(other))
    result = runner.invoke(app, ["guard", "--preview", "--format", "json", "--", UV, "sync"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["venv"] == str(other)
