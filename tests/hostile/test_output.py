"""Text from snapshots, hosts and files never drives the terminal, Markdown or GitHub (no
printed line starts a workflow command, wrapped or not); an output that cannot be written (a
full disk, a closed stdout, a step summary that is not a file) is one line, never a traceback
or a hang."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from envguard.cli import app
from envguard.compare.models import Change, Drift, Severity
from envguard.render.github import drift_github
from envguard.render.markdown import drift_markdown
from envguard.render.table import drift_table
from envguard.render.text import printable
from envguard.snapshots import store
from factories import package, snapshot
from hostile.helpers import diff, envguard, pair, pkg

runner = CliRunner()

HOSTILE = "x\x1b]0;title\x07\x1b[2J\u202e`![](https://e.example/p.png)[click](https://e.example)<img src=x>|~~s~~"


def hostile_drift() -> Drift:
    change = Change(
        section="packages",
        kind="added",
        name=HOSTILE,
        expected=None,
        actual="<img src=y>",
        severity=Severity.warning,
        message=f"{HOSTILE} added\n::error::forged",
    )
    return Drift(changes=(change,), metrics={"note": HOSTILE}, expected_name="good")


def test_terminal_output_carries_no_control_characters() -> None:
    console = Console(file=io.StringIO(), width=300, color_system=None, record=True)
    drift_table(hostile_drift(), console)
    text = console.export_text()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b" in text  # shown, escaped: the reader sees that something odd was there


def test_markdown_output_has_no_live_markup() -> None:
    md = drift_markdown(hostile_drift())
    assert "<img" not in md and "\x1b" not in md
    assert "![" not in md and "](" not in md.replace("\\](", "")
    assert "`" not in md.replace("\\`", "")
    body = [line for line in md.splitlines() if line.startswith("| packages")]
    assert len(body) == 1 and body[0].count(" | ") == 5  # the | in the name did not add a cell


def test_annotations_cannot_start_a_second_command() -> None:
    out = drift_github(hostile_drift())
    assert len(out.strip().splitlines()) == 1 and "%0A:\u200b:error:\u200b:forged" in out
    assert "\x1b" not in out


def test_no_printed_line_starts_a_workflow_command(tmp_path: Path) -> None:
    a, b = pair(
        tmp_path,
        [pkg("base")],
        [pkg("base"), pkg("::error title=pwned::fake", requires=("helperz",)), pkg("helperz")],
    )
    for args in ([], ["--format", "github"], ["--expand"], ["--format", "markdown"]):
        out = diff(a, b, *args).stdout
        lines = [ln for ln in out.splitlines() if ln.lstrip().startswith("::")]
        assert all(
            ln.startswith(
                (
                    "::error file",
                    "::error title=envguard",
                    "::warning title=envguard",
                    "::notice title=envguard",
                    "::warning file",
                    "::notice file",
                )
            )
            for ln in lines
        ), lines


@pytest.mark.parametrize("text", ["::add-mask::x", "a ##[error]b", "x" * 71 + " ::error::fake"])
def test_no_workflow_command_survives_wrapping(text: str) -> None:
    shown = printable(text)
    assert "::" not in shown and "##[" not in shown


def test_show_wraps_nothing_into_a_workflow_command(in_tmp: Path) -> None:
    data = json.loads(store.dumps(snapshot([package("ok", "1")], name="w")))
    data["warnings"] = ["x" * 71 + " ::add-mask::supersecret ::error::fake"]
    data["note"] = "y" * 60 + " ##[error]legacy"
    (in_tmp / "w.json").write_text(json.dumps(data))
    out = runner.invoke(app, ["show", "w.json"], env={"COLUMNS": "80"}).stdout
    assert all(not line.strip().startswith("::") for line in out.splitlines())
    assert "##[" not in out


def test_output_that_cannot_be_written_is_one_line(project: Path) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "envguard", "show", "good.json"],
            cwd=project, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == "error: cannot write the output: No space left on device\n"
    piped = subprocess.run(
        f"{sys.executable} -m envguard show good.json | head -c 1",
        shell=True, cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert piped.stderr == ""  # a reader that stopped early is not an error to print


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_step_summary_that_is_not_a_file_is_a_warning(project: Path, kind: str) -> None:
    target = project / "summary"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    result = envguard(
        "check", "good.json", "--against", "good.json", "--format", "github",
        cwd=project, GITHUB_STEP_SUMMARY=str(target),
    )  # fmt: skip
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert result.stderr.startswith("warning: $GITHUB_STEP_SUMMARY")


def test_stdout_closed_is_not_a_traceback(project: Path) -> None:
    done = subprocess.run(
        f"{sys.executable} -m envguard show good.json >&-",
        shell=True, cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in done.stderr and done.returncode in (0, 1)


def test_data_asked_for_on_a_closed_stdout_is_one_line(project: Path) -> None:
    done = subprocess.run(
        f"{sys.executable} -m envguard export good.json >&-",
        shell=True, cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr == "error: cannot write the output: standard output is closed\n"
