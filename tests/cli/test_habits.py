"""The command line follows its ecosystem's habits: help that says what options take, flags
that read naturally, one error style, -q/-v, completion, defaults that never collide."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

runner = CliRunner()
COMMANDS = [
    "snapshot", "show", "list", "log", "schema", "diff", "check", "fleet", "rebuild", "export",
    "restore", "bisect",
]  # fmt: skip


def envguard(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envguard", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **env},
        timeout=120,
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_what_options_take(command: str) -> None:
    result = envguard(command, "--help")
    assert result.returncode == 0
    assert "--no-no-" not in result.stdout and "no-no-" not in result.stdout
    # A placeholder names what an option takes (PATH, N, X), never click's type name.
    assert not re.search(r"<(str|text|int|integer|float|path|int range)>", result.stdout)


@pytest.mark.version_pinned("choices as <a|b> is how typer's vendored click writes them")
def test_choices_are_listed() -> None:
    out = envguard("diff", "--help").stdout
    assert "<table|json|markdown|github|html>" in out
    assert "<critical|warning|info|never>" in out


@pytest.mark.version_pinned("the wording of the usage error is typer's vendored click's")
def test_usage_errors_look_like_every_other_error(tmp_path: Path) -> None:
    result = envguard("diff", "--no-such-option", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Usage: envguard diff")
    assert lines[1].startswith("error: No such option: --no-such-option")
    assert lines[2] == "hint: see 'envguard diff --help'"


def test_a_usage_error_laid_out_over_lines_is_said_on_one(tmp_path: Path) -> None:
    # click writes a missing choice as "Choose from:\n\t...": never escapes on the line
    result = envguard("schema", cwd=tmp_path)
    assert result.returncode == 2
    error = result.stderr.splitlines()[1]
    assert error.startswith("error: Missing argument 'KIND'. Choose from: snapshot, drift,")
    assert "\\" not in error and "\t" not in error
    # what the user typed keeps its spaces
    typed = envguard("list", "my  snap", "b", cwd=tmp_path).stderr.splitlines()[1]
    assert "(my  snap b)" in typed
    assert "Error:" not in result.stderr


def test_quiet_prints_nothing_and_verbose_says_what_runs(in_tmp: Path, good_venv: Path) -> None:
    assert envguard("snapshot", "--python", str(good_venv), "--name", "good").returncode == 0
    quiet = envguard("-q", "diff", "good", "--python", str(good_venv))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    loud = envguard("-v", "diff", "good", "--python", str(good_venv))
    assert loud.returncode == 0
    assert "envguard: probe: " in loud.stderr and " -I -S -" in loud.stderr
    assert "no drift" in loud.stdout
    after = envguard("diff", "good", "--python", str(good_venv), "-q")  # after the command too
    assert (after.returncode, after.stdout, after.stderr) == (0, "", "")
    assert "envguard: probe: " in envguard("diff", "good", "-v", "--python", str(good_venv)).stderr


def test_quiet_keeps_the_data_asked_for(in_tmp: Path, good_venv: Path) -> None:
    """-q silences the chatter, never the output a flag asked for (as uv's -q)."""
    import json

    python = ("--python", str(good_venv))
    streamed = envguard("-q", "snapshot", *python, "--out", "-")
    assert streamed.returncode == 0 and streamed.stderr == ""
    assert json.loads(streamed.stdout)["schema_version"]
    saved = envguard("snapshot", *python, "--name", "good", "-q")
    assert (saved.returncode, saved.stdout, saved.stderr) == (0, "", "")  # no "wrote ..."
    drift = envguard("-q", "diff", "good", *python, "--format", "json")
    assert drift.returncode == 0 and json.loads(drift.stdout)["changes"] == []
    markdown = envguard("diff", "good", *python, "--format", "markdown", "-q")
    assert markdown.returncode == 0 and markdown.stdout.strip()
    exported = envguard("-q", "export", "good", "--format", "requirements")
    assert exported.returncode == 0 and "==" in exported.stdout


def test_quiet_keeps_what_reads_a_snapshot(in_tmp: Path, good_venv: Path) -> None:
    import json

    assert envguard("snapshot", "--python", str(good_venv), "--name", "good").returncode == 0
    for args in (("schema", "snapshot"), ("show", "good", "--format", "json")):
        shown = envguard("-q", *args)
        assert shown.returncode == 0 and json.loads(shown.stdout), args
    listed = envguard("-q", "list", "--format", "json")
    assert listed.returncode == 0 and "good" in listed.stdout
    assert envguard("-q", "list").stdout == envguard("-q", "show", "good").stdout == ""


def test_show_and_check_default_to_the_newest(in_tmp: Path, good_venv: Path) -> None:
    assert envguard("snapshot", "--python", str(good_venv), "--name", "good").returncode == 0
    shown = envguard("show")
    assert shown.returncode == 0 and "good" in shown.stdout
    assert envguard("check", "--python", str(good_venv)).returncode == 0


def test_default_names_never_collide(in_tmp: Path, good_venv: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "envguard", "snapshot", "--python", str(good_venv)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert len(list((in_tmp / "snapshots").glob("*.json"))) == 3


def test_completion_through_typer() -> None:
    result = envguard(COMP_WORDS="envguard di", COMP_CWORD="1", _ENVGUARD_COMPLETE="complete_bash")
    assert result.returncode == 0 and result.stdout.split() == ["diff"]
    script = envguard(_ENVGUARD_COMPLETE="source_bash")
    assert script.returncode == 0 and "_envguard_completion" in script.stdout


def test_plan_table_wraps_commands_instead_of_cutting_them(in_tmp: Path, good_venv: Path) -> None:
    assert envguard("snapshot", "--python", str(good_venv), "--name", "good").returncode == 0
    result = envguard("rebuild", "good", "--venv", "new", COLUMNS="60")
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout


def test_a_mistyped_command_is_named_with_the_nearest_one() -> None:
    result = envguard("snapshto")
    assert result.returncode == 2
    assert "No such command 'snapshto'" in result.stderr and "snapshot" in result.stderr


_TYPER_PROGRAM = "import sys; sys.argv = {argv!r}\nfrom envguard.cli import main\nmain()"


def _typer_help(columns: str) -> str:
    """The root help as typer renders it (envguard.cli directly, not the stored screen)."""
    return subprocess.run(
        [sys.executable, "-c", _TYPER_PROGRAM.format(argv=["envguard", "--help"])],
        capture_output=True, text=True, check=True, timeout=120,
        env={**os.environ, "COLUMNS": columns},
    ).stdout  # fmt: skip


def test_the_version_is_typers_without_loading_typer() -> None:
    """`envguard --version` (CI logs, bug reports) is written without typer: the line typer
    writes, exit 0; with anything beside it, typer says it as before."""
    typer_said = subprocess.run(
        [sys.executable, "-c", _TYPER_PROGRAM.format(argv=["envguard", "--version"])],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    loaded = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.stderr.write(str('typer' in sys.modules)))\n"
        "sys.argv = ['envguard', '--version']\n"
        "from envguard.__main__ import main\n"
        "main()\n"
    )
    fast = subprocess.run(
        [sys.executable, "-c", loaded], capture_output=True, text=True, check=False, timeout=120
    )
    assert (fast.returncode, fast.stdout, fast.stderr) == (0, typer_said.stdout, "False")
    assert typer_said.stdout.startswith("envguard ") and typer_said.stdout.endswith("\n")
    assert envguard("-q", "--version").stdout == typer_said.stdout  # typer's own path


@pytest.mark.version_pinned("help_screen.TEXT is the text the newest typer writes")
def test_the_stored_help_screen_is_typers() -> None:
    """`envguard --help` is written without loading typer; it must be what typer writes. If
    this fails after a change to a command, regenerate help_screen.TEXT (see its comment)."""
    from envguard import help_screen

    assert help_screen.TEXT == _typer_help("80") == _typer_help("200")
    assert envguard("--help").stdout == help_screen.TEXT
    narrow = envguard("--help", COLUMNS="60")
    assert narrow.returncode == 0 and narrow.stdout == _typer_help("60") != help_screen.TEXT
