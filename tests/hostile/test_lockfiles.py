"""Hostile lockfiles (they come from pull requests): nothing local is printed, nothing hangs,
every failure is one line and exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from envguard.cli import app
from envguard.compare.lockfiles import read_lock
from envguard.errors import EnvguardError
from envguard.snapshots import store
from factories import package, snapshot
from hostile.helpers import write_json as _write

runner = CliRunner()
SECRET = "envguard-test-secret-7f3a"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MY_CI_SECRET_TOKEN", SECRET)
    (tmp_path / "good.json").write_text(store.dumps(snapshot([package("ok", "1")])))
    return tmp_path


def check(lock: str) -> tuple[int, str]:
    result = runner.invoke(app, ["check", "good.json", "--lock", lock])
    return result.exit_code, result.stdout + result.stderr


@pytest.mark.parametrize(
    "line",
    [
        "-r /proc/self/environ",
        "-r/proc/self/environ",
        "--requirement=/proc/self/environ",
        "--requirement /proc/self/environ",
        "-r ../../../../../../proc/self/environ",
        "-r /etc/passwd",
    ],
)
def test_include_outside_the_project_is_refused_without_echo(work: Path, line: str) -> None:
    (work / "req.txt").write_text(line + "\n")
    code, out = check("req.txt")
    assert code == 2
    assert SECRET not in out and "root:" not in out
    assert "-r leads outside the project" in out and "Traceback" not in out
    assert len(out.strip().splitlines()) == 1


def test_include_of_a_symlink_leading_outside_is_refused(work: Path) -> None:
    (work / "inner.txt").symlink_to("/proc/self/environ")
    (work / "req.txt").write_text("-r inner.txt\n")
    code, out = check("req.txt")
    assert code == 2 and SECRET not in out and "outside the project" in out


def test_include_inside_the_project_is_followed_in_every_spelling(work: Path) -> None:
    (work / "sub").mkdir()
    (work / "sub" / "base.txt").write_text("ok==1\n")
    for spelling in ("-r sub/base.txt", "-rsub/base.txt", "--requirement=sub/base.txt"):
        (work / "req.txt").write_text(spelling + "\n")
        assert check("req.txt")[0] == 0, spelling


def test_include_of_a_fifo_or_device_never_hangs(work: Path) -> None:
    os.mkfifo(work / "fifo.txt")
    (work / "req.txt").write_text("-r fifo.txt\n")
    code, out = check("req.txt")
    assert code == 2 and "not a regular file" in out
    code, out = check("fifo.txt")
    assert code == 2 and "not a regular file" in out


@pytest.mark.parametrize(
    "content",
    [
        f"ok==1\n{SECRET} ===\n",  # a bad requirement is not quoted back
        f"ok ; python_version >>> '{SECRET}'\n",
    ],
)
def test_bad_lines_are_never_quoted(work: Path, content: str) -> None:
    (work / "req.txt").write_text(content)
    code, out = check("req.txt")
    assert code == 2 and SECRET not in out and "req.txt:" in out
    assert len(out.strip().splitlines()) == 1


def test_undecodable_deep_and_huge_lockfiles_are_one_line(work: Path) -> None:
    (work / "req.txt").write_bytes(b"ok==1\n\xff\xfe==2\n")
    assert check("req.txt") == (2, check("req.txt")[1])
    assert "not UTF-8" in check("req.txt")[1]
    (work / "uv.lock").write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    code, out = check("uv.lock")
    assert code == 2 and "not valid TOML" in out and "Traceback" not in out
    with open(work / "big.txt", "wb") as fh:
        fh.truncate((64 << 20) + 1)  # sparse: no disk used
    code, out = check("big.txt")
    assert code == 2 and "larger than" in out


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=st.text(
        alphabet=st.sampled_from([*"abc=<>!~;[]()@#'\" \\\n-r.,*:/$%{}0123456789", "\x00"]),
        max_size=80,
    ),
    name=st.sampled_from(["requirements.txt", "uv.lock", "pylock.toml"]),
)
def test_fuzzed_lockfiles_give_pins_or_one_line_errors(work: Path, text: str, name: str) -> None:
    path = work / name
    path.write_text(text)
    snap = store.load("good.json")
    try:
        read_lock(path, snap)
    except EnvguardError as exc:
        assert "\n" not in exc.message


@pytest.mark.parametrize(
    ("a_line", "b_line"),
    [
        ("dependencies = 5", ""),
        ('dependencies = [{ name = "b", marker = 5 }]', ""),
        ('dependencies = [{ name = "b", extra = 5 }]', ""),
        ('dependencies = [{ name = "b" }]', "resolution-markers = 5"),
    ],
)
def test_uv_lock_values_of_the_wrong_type_are_one_line(
    tmp_path: Path, a_line: str, b_line: str
) -> None:
    lock = tmp_path / "uv.lock"  # no pyproject.toml beside it: envguard's own walk reads it
    lock.write_text(
        'version = 1\n\n[[package]]\nname = "a"\nversion = "1"\nsource = { editable = "." }\n'
        f'{a_line}\n\n[[package]]\nname = "b"\nversion = "1"\nsource = {{ registry = "x" }}\n'
        f"{b_line}\n"
    )
    _write(tmp_path / "s.json", json.loads(store.dumps(snapshot([package("b", "1")]))))
    result = runner.invoke(app, ["check", str(tmp_path / "s.json"), "--lock", str(lock)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
