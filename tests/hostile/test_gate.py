"""The lockfile gate (`check --lock`, `--find-lock`, the GitHub Action) on a hostile project:
option-shaped inputs stay data, no variable is expanded from the environment, every marker error
is one line, each -r file is read once, a symlink out of the project is refused, uv ignores the
project's own uv settings, and a walked lock labels sources as uv."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.snapshots import store
from factories import package, snapshot

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
SECRET = "supersecret123"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MY_CI_SECRET_TOKEN", SECRET)
    (tmp_path / "good.json").write_text(store.dumps(snapshot([package("typer", "0.28.0")])))
    return tmp_path


def check(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["check", "good.json", *args])
    return result.exit_code, result.output


def test_an_option_shaped_action_input_is_a_file_name(work: Path) -> None:
    marker = work / "pwned"
    (work / "requirements.txt").write_text("typer==0.28.0\n")
    env = {
        **os.environ,
        "GITHUB_ACTION_PATH": str(ROOT),
        "ENVGUARD": f"{sys.executable} -m envguard",
        "INPUT_SNAPSHOT": f'--via=sh -c "touch {marker}; exit 1"',
        "INPUT_LOCK": "requirements.txt",
        "INPUT_FAIL_ON": "--via=sh",
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "action" / "run.sh")], env=env, cwd=work, capture_output=True, text=True
    )
    assert not marker.exists()
    assert proc.returncode == 2 and "\nerror: " in "\n" + proc.stderr


@pytest.mark.parametrize(
    "line",
    [
        "typer==0.28.0+${MY_CI_SECRET_TOKEN}",
        "foo @ https://example.invalid/${MY_CI_SECRET_TOKEN}/foo.whl",
        "-e git+https://example.invalid/${MY_CI_SECRET_TOKEN}.git#egg=bar",
        "-r ${MY_CI_SECRET_TOKEN}.txt",
        'foo==1 ; "s" in "${MY_CI_SECRET_TOKEN}"',
    ],
)
def test_a_secret_named_variable_is_never_expanded(work: Path, line: str) -> None:
    (work / "r.txt").write_text(line + "\n")
    for fmt in ("table", "json", "github"):
        code, out = check("--lock", "r.txt", "--format", fmt)
        assert code in (1, 2) and SECRET not in out, out


WEBHOOK = "T0000/B0000/XXXXwebhookXXXX"


def test_no_variable_is_expanded_from_the_ci_environment(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name that does not look secret (SLACK_WEBHOOK) held a secret all the same: its value
    was printed in every format and in the step summary."""
    summary = work / "summary.md"
    monkeypatch.setenv("SLACK_WEBHOOK", WEBHOOK)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    (work / "r.txt").write_text("x @ https://example.invalid/${SLACK_WEBHOOK}/x.whl\n")
    for fmt in ("table", "json", "markdown", "github", "html"):
        code, out = check("--lock", "r.txt", "--format", fmt)
        assert code == 1 and WEBHOOK not in out, (fmt, out)
        if fmt == "json":
            url = json.loads(out)["changes"][1]["expected"]  # the lock's side
            assert url == "https://example.invalid/${SLACK_WEBHOOK}/x.whl"
    assert summary.read_text() and WEBHOOK not in summary.read_text()


def test_a_variable_as_a_version_is_one_line_naming_it(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TYPER_VERSION", "0.28.0")
    (work / "r.txt").write_text("typer==${TYPER_VERSION}\n")
    code, out = check("--lock", "r.txt")
    assert code == 2 and out.startswith("error: r.txt:1: ${TYPER_VERSION} is not expanded")
    assert "0.28.0" not in out


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("r.txt", 'foo==1.0 ; "a" < "b"\n'),
        (
            "pylock.toml",
            'lock-version = "1.0"\ncreated-by = "x"\n[[packages]]\nname = "foo"\n'
            'version = "1.0"\nmarker = \'"a" < "b"\'\n'
            'wheels = [{ name = "foo-1.0-py3-none-any.whl", url = "https://example.invalid/f.whl",'
            ' hashes = { sha256 = "00" } }]\n',
        ),
        (
            "pylock.toml",
            'lock-version = "1.0"\ncreated-by = "x"\nenvironments = [\'"a" < "b"\']\npackages = []\n',
        ),
    ],
)
def test_markers_comparing_two_strings_are_one_line(work: Path, name: str, content: str) -> None:
    (work / name).write_text(content)
    code, out = check("--lock", name)
    assert code == 2 and out.startswith("error: ") and "Traceback" not in out
    assert len(out.strip().splitlines()) == 1


def test_includes_that_fan_out_are_read_once(work: Path) -> None:
    for depth in range(9):
        (work / f"f{depth}.txt").write_text(f"-r f{depth + 1}.txt\n" * 10)
    (work / "f9.txt").write_text("typer==0.28.0\n")
    start = time.monotonic()
    assert check("--lock", "f0.txt")[0] == 0
    assert time.monotonic() - start < 10


def test_a_lockfile_symlink_leading_out_of_the_project_is_refused(work: Path) -> None:
    outside = work.parent / f"{work.name}-outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    (work / "requirements.txt").symlink_to(outside / "secret.txt")
    (work / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1"\n')
    for args in (["--lock", "requirements.txt"], ["--find-lock"]):
        code, out = check(*args)
        assert code == 2 and SECRET not in out
        assert "a symlink leading outside the project" in out


def test_uv_never_follows_the_projects_own_uv_settings(work: Path) -> None:
    planted = work.parent / f"{work.name}-planted-cache"
    shutil.copy(DATA / "git-and-url.uv.lock", work / "uv.lock")
    pyproject = (DATA / "git-and-url.pyproject.toml").read_text()
    (work / "pyproject.toml").write_text(pyproject + f'\n[tool.uv]\ncache-dir = "{planted}"\n')
    (work / "uv.toml").write_text(f'cache-dir = "{planted}"\n')
    check("--lock", "uv.lock")
    assert not planted.exists()


def test_a_walked_lock_labels_sources_as_uv_exports_them(work: Path) -> None:
    shutil.copy(DATA / "git-and-url.uv.lock", work / "uv.lock")
    shutil.copy(DATA / "git-and-url.pyproject.toml", work / "pyproject.toml")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "envguard",
            "diff",
            "--lock",
            "-",
            "--lock",
            "uv.lock",
            "--format",
            "json",
        ],
        input=(work / "uv.lock").read_text(),
        capture_output=True,
        text=True,
        cwd=work,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["changes"] == []


def test_a_python_version_file_naming_a_program_is_never_run(work: Path) -> None:
    """uv runs a `.python-version` path as an interpreter when it reads config; envguard
    gives uv only the resolver settings (--no-config --config-file), so it never does."""
    ran = work.parent / f"{work.name}-ran"
    shutil.copy(DATA / "git-and-url.uv.lock", work / "uv.lock")
    shutil.copy(DATA / "git-and-url.pyproject.toml", work / "pyproject.toml")
    (work / "evilpy").write_text(f'#!/bin/sh\ntouch "{ran}"\nexec "{sys.executable}" "$@"\n')
    (work / "evilpy").chmod(0o755)
    (work / ".python-version").write_text("./evilpy\n")
    (work / "uv.toml").write_text(
        'python-preference = "only-system"\nkeyring-provider = "subprocess"\n'
    )
    check("--lock", "uv.lock")
    assert not ran.exists()
