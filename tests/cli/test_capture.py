"""The command line: exit codes, one-line errors, nothing written on failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_snapshot_writes_named_file_and_refuses_to_overwrite(in_tmp: Path, good_venv: Path) -> None:
    code, out, err = invoke(
        "snapshot",
        "--python",
        str(good_venv),
        "--name",
        "good",
        "--metric",
        "tok_s=21500",
        "--note",
        "8xH200",
    )
    assert code == 0, err
    path = in_tmp / "snapshots" / "good.json"
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1 and data["metrics"] == {"tok_s": 21500}
    assert data["note"] == "8xH200" and "wrote snapshots/good.json" in out
    before = path.read_text()
    code, _, err = invoke("snapshot", "--python", str(good_venv), "--name", "good")
    assert code == 2 and "already exists" in err
    assert path.read_text() == before
    code, _, _ = invoke("snapshot", "--python", str(good_venv), "--name", "good", "--force")
    assert code == 0


def test_default_target_is_dot_venv_and_out_dash_prints_json(in_tmp: Path, good_venv: Path) -> None:
    assert good_venv == in_tmp / ".venv"
    code, out, _ = invoke("snapshot", "--out", "-")
    assert code == 0
    data = json.loads(out)
    assert data["interpreter"]["prefix"] == str(good_venv)
    assert not (in_tmp / "snapshots").exists()


def test_virtual_env_wins_over_dot_venv(
    in_tmp: Path, good_venv: Path, venv_factory: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = venv_factory("other")  # type: ignore[operator]
    monkeypatch.setenv("VIRTUAL_ENV", str(other))
    code, out, _ = invoke("snapshot", "--out", "-")
    assert code == 0 and json.loads(out)["interpreter"]["prefix"] == str(other)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--python", "missing/python"], "--python missing/python: no such file or directory"),
        (["--python", "notes.txt"], "--python notes.txt: cannot run it as a Python interpreter"),
        (["--python", "fakepy"], "not a Python interpreter"),
        (["--python", "oldpy"], "Python 3.7 is too old"),
        (["--python", "emptydir"], "not a virtualenv"),
        (["--metric", "tok_s"], "--metric 'tok_s': expected NAME=VALUE"),
        (["--repo", "emptydir"], "--repo emptydir: not a git work tree"),
        (["--repo", "nowhere"], "--repo nowhere: no such directory"),
        (["--file", "gone.py"], "gone.py: no such file or directory"),
        (["--name", "../escape"], "--name '../escape'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    in_tmp: Path, good_venv: Path, args: list[str], message: str
) -> None:
    (in_tmp / "notes.txt").write_text("hello")
    (in_tmp / "emptydir").mkdir()
    fake = in_tmp / "fakepy"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    # What a Python 3.7 answers to the probe's bootstrap.
    old = in_tmp / "oldpy"
    old.write_text("#!/bin/sh\necho 'envguard-probe: Python 3.7 is too old' >&2\nexit 3\n")
    old.chmod(0o755)
    code, _, err = invoke("snapshot", "--name", "x", *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: ") and message in lines[0], err
    assert "Traceback" not in err
    assert not (in_tmp / "snapshots" / "x.json").exists()


def test_show_and_list(in_tmp: Path, good_venv: Path) -> None:
    assert invoke("snapshot", "--name", "good", "--metric", "tok_s=21500")[0] == 0
    code, out, _ = invoke("list")
    assert code == 0 and "good" in out and "2.11.0+cu128" in out and "tok_s=21500" in out
    code, out, _ = invoke("show", "good")
    assert code == 0 and "torch" in out and "cudnn 9.1.0.70" in out
    code, out, _ = invoke("list", "--format", "json")
    listed = json.loads(out)
    assert (listed["schema"], listed["schema_version"]) == ("envguard.list", 1)
    assert listed["snapshots"][0]["name"] == "good"
    code, _, err = invoke("show", "nope")
    assert code == 2 and "nope: no such snapshot" in err


def test_real_subprocess_exit_codes(in_tmp: Path, good_venv: Path) -> None:
    env = {**os.environ, "VIRTUAL_ENV": str(good_venv)}
    proc = subprocess.run(
        [sys.executable, "-m", "envguard", "snapshot", "--name", "sub"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (in_tmp / "snapshots" / "sub.json").is_file()
    proc = subprocess.run(
        [sys.executable, "-m", "envguard", "snapshot", "--python", "/nonexistent/py"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: --python /nonexistent/py")
    assert "Traceback" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "envguard", "--help"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0 and "snapshot" in proc.stdout


def test_markup_in_snapshot_text_is_shown_verbatim(in_tmp: Path, good_venv: Path) -> None:
    code, _, err = invoke(
        "snapshot", "--name", "m", "--note", "tried [/fast] path [bold]x", "--metric", "loss=nan"
    )
    assert code == 0, err
    code, out, err = invoke("show", "m")
    assert code == 0, err
    assert "tried [/fast] path [bold]x" in out
    assert json.loads((in_tmp / "snapshots" / "m.json").read_text())["metrics"] == {"loss": "nan"}
    assert invoke("list")[0] == 0


def test_the_probe_refuses_an_old_python_itself(in_tmp: Path, good_venv: Path) -> None:
    """A stand-in that runs the real payload with sys.version_info faked to 3.7."""
    old = in_tmp / "python3.7"
    old.write_text(
        f"#!/bin/sh\nexec {sys.executable} -c "
        "\"import sys; sys.version_info = (3, 7, 9, 'final', 0); exec(sys.stdin.read())\"\n"
    )
    old.chmod(0o755)
    code, _, err = invoke("snapshot", "--python", str(old), "--name", "old")
    assert code == 2 and "Python 3.7 is too old" in err
    assert not (in_tmp / "snapshots" / "old.json").exists()


def test_out_with_host_placeholder_names_the_file_after_the_host(
    in_tmp: Path, good_venv: Path
) -> None:
    import os

    code, out, err = invoke("snapshot", "--out", "run/{host}.json")
    assert code == 0, err
    path = in_tmp / "run" / f"{os.uname().nodename}.json"
    assert path.is_file() and f"wrote {path.relative_to(in_tmp)}" in out


def test_a_long_or_oddly_named_variable_does_not_sink_the_snapshot(
    in_tmp: Path, good_venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PYTHONPATH of 70,000 characters is kept as its length and a hash (the report takes
    at most 64 KiB a value), and diff still tells a change in it; a variable whose name
    holds an escape is left out with a warning. Either one used to refuse the whole
    report: no snapshot at all on that machine."""
    monkeypatch.setenv("PYTHONPATH", "/opt/lib:" * 7800)
    monkeypatch.setenv("TORCH_\x1b[2JX", "1")
    code, out, err = invoke("snapshot", "--python", str(good_venv), "--name", "long")
    assert code == 0, err
    data = json.loads((in_tmp / "snapshots" / "long.json").read_text())
    assert data["env"]["PYTHONPATH"].startswith("<70200 characters, sha256 ")
    assert not [name for name in data["env"] if name.startswith("TORCH_\x1b")]
    assert any("TORCH_\\x1b[2JX" in w and "not recorded" in w for w in data["warnings"])
    assert invoke("diff", "long", "--python", str(good_venv))[0] == 0
    monkeypatch.setenv("PYTHONPATH", "/opt/lib:" * 7799 + "/opt/lob:")
    code, out, err = invoke("diff", "long", "--python", str(good_venv))
    assert code == 1 and "PYTHONPATH" in out, out


def test_a_branch_or_remote_holding_a_bidi_or_escape_does_not_sink_the_snapshot(
    in_tmp: Path, good_venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git allows U+202E in a branch's name and anything in a remote's URL: they are kept
    as their escapes (one printable line that still says what is there), where the report
    used to be refused whole."""
    from factories import git, make_git_repo

    repo = make_git_repo(in_tmp / "proj")
    git(repo, "checkout", "-q", "-b", "fix\u202egnp.py")
    git(repo, "remote", "add", "origin", "https://git.example/te\x1b[2Jam.git")
    monkeypatch.chdir(repo)
    code, _out, err = invoke("snapshot", "--python", str(good_venv), "--name", "odd")
    assert code == 0, err
    (record,) = json.loads((repo / "snapshots" / "odd.json").read_text())["repos"]
    assert record["branch"] == "fix\\u202egnp.py"
    assert record["remote"] == "https://git.example/te\\x1b[2Jam.git"
    assert invoke("diff", "odd", "--python", str(good_venv))[0] == 0
