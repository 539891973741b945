"""What the guard judges with: the live venv (never whichever snapshot file claims to be the
newest), and requirements files read as the installers read them, includes in every
spelling, so that no file the dry run would read escapes the check."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.guard.reqfile import read_lines
from factories import UV, run

runner = CliRunner()


def guard(venv: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["guard", "--venv", str(venv), *args])
    return result.exit_code, result.stdout, result.stderr


def _freeze(venv: Path) -> str:
    return run([UV, "pip", "freeze", "--python", str(venv)]).stdout


def _plant(venv: Path, name: str) -> Path:
    """A snapshot of ``venv`` that records torch 2.14.1 (the venv has 2.13.0+cpu), dated
    to be the newest: what a stale or planted file in snapshots/ looks like."""
    made = runner.invoke(
        app, ["snapshot", "--python", str(venv / "bin" / "python"), "--name", name]
    )
    assert made.exit_code == 0, made.stderr
    path = Path("snapshots") / f"{name}.json"
    doc = json.loads(path.read_text())
    for package in doc["packages"]:
        if package["name"] == "torch":
            package["version"] = "2.14.1"
    doc["torch"] = None
    doc["created"] = "2099-01-01T00:00:00+00:00"
    path.write_text(json.dumps(doc))
    return path


def test_a_planted_newest_snapshot_cannot_hide_a_torch_swap(stack: tuple[Path, Path]) -> None:
    venv, wh = stack
    _plant(venv, "planted")
    before = _freeze(venv)
    swap = ["--", UV, "pip", "install", "--no-index", "--find-links", str(wh), "torch==2.14.1"]
    code, out, err = guard(venv, *swap)
    assert code == 1, out + err
    assert out.startswith("this install would change torch 2.13.0+cpu -> 2.14.1 (critical")
    assert "(against the venv as it is)" in out.splitlines()[0]
    assert _freeze(venv) == before
    # Named by the user, it is compared as well: the venv's own change still stops it.
    code, out, err = guard(venv, "planted", *swap)
    assert code == 1, out + err
    assert "--allow torch" in err
    # Against the snapshot the install is a swap of torch's build (the planted record is
    # not the wheel guard read), or, where the snapshot matches the wheel, the venv's own
    # change is shown with a note: either way torch stops it.
    assert out.startswith("this install would ") and "torch" in out.splitlines()[0]
    assert "already differs" not in err  # torch is the install's, not a change before it
    assert _freeze(venv) == before


@pytest.mark.parametrize(
    "line",
    [
        "-r/proc/self/environ",
        "-r /proc/self/environ",
        "-r=/proc/self/environ",
        "-c/proc/self/environ",
        "--requirement=/proc/self/environ",
        "--requirement /proc/self/environ",
        "--requir /proc/self/environ",  # optparse's abbreviation
        "--constraint=/proc/self/environ",
        "  -qr /proc/self/environ  # a comment",
        "--pre -r /proc/self/environ",
        "-r \\\n/proc/self/environ",  # a continuation line
        "-r ${PROC}/self/environ",  # pip expands ${NAME}
        "-r file:///proc/self/environ",
        "-r '/proc/self/environ'",
    ],
)
def test_every_spelling_of_an_include_goes_through_the_include_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    from factories import make_venv

    venv = tmp_path / ".venv"
    make_venv(venv)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROC", "/proc")
    Path("outer.txt").write_text(f"six\n{line}\n")
    code, _, err = guard(venv, "--", "uv", "pip", "install", "-r", "outer.txt")
    assert code == 2, err
    assert "a requirements file in proc/; not read" in err


def test_includes_are_read_as_pip_reads_a_line() -> None:
    env = {"D": "deps"}
    text = "six -r a.txt\n-e ./proj\n--index-url=https://x -c b.txt\n-r ${D}/c.txt\n# -r no.txt\n"
    read = read_lines(text, env)
    assert sorted(read.includes) == ["a.txt", "b.txt", "deps/c.txt"]
    assert read.builds == ("-e ./proj",)
    assert read_lines(
        "./proj\nx @ https://h/x-1.tar.gz\ny @ https://h/y-1-py3-none-any.whl\n", {}
    ).builds == (
        "./proj",
        "x @ https://h/x-1.tar.gz",
    )


def test_pip_never_prints_the_environment_from_an_include(
    pip_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-r/proc/self/environ` written without a space, in a requirements file, or named by
    a lower-case PIP_requirement: refused before pip runs, so pip's error (which quotes the
    line it cannot read) never shows the job's variables."""
    venv = pip_venv / "guarded"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CI_JOB_NOTE", "leaked-value-4711")
    Path("reqs.txt").write_text("-r/proc/self/environ\n")
    python = str(venv / "bin" / "python")
    for args, env in (
        (["-r", "reqs.txt"], {}),
        (["six"], {"PIP_requirement": "/proc/self/environ"}),
        (["six"], {"PIP_constraint": "reqs.txt"}),
    ):
        with monkeypatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            code, out, err = guard(venv, "--", python, "-m", "pip", "install", *args)
        assert code == 2, err
        assert "a requirements file in proc/; not read" in err
        assert "leaked-value-4711" not in out + err
    assert os.environ.get("CI_JOB_NOTE") == "leaked-value-4711"


@pytest.mark.parametrize("value", ["inf", "1e309", "nan", "2e6"])
@pytest.mark.parametrize("form", [[], ["--format", "json"], ["--preview"]])
def test_a_timeout_that_is_no_number_of_seconds_is_refused_before_anything_runs(
    stack: tuple[Path, Path], value: str, form: list[str]
) -> None:
    """`--timeout inf` and `1e309` passed typer's `min` and ended in a traceback once the
    dry run had started; `nan` waited for "nan s". One reader of seconds for all."""
    venv, wh = stack
    code, out, err = guard(
        venv, "--timeout", value, *form, "--", UV, "pip", "install", "--find-links", str(wh), "six"
    )
    assert code == 2 and out == "", err
    assert "--timeout" in err and "Traceback" not in err
    if value == "2e6":  # past guard's own bound (cli/numbers reads the others first)
        assert err == "error: --timeout 2e+06: seconds, more than 0 and at most 1e+06\n"


def test_restores_warm_timeout_is_checked_before_anything_is_restored(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["restore", str(tmp_path / "none.json"), "--warm", "true", "--warm-timeout", "inf"]
    )
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "--warm-timeout" in result.stderr
