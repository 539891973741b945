"""`--format json` of `guard`, `history`, `undo` and `protect` on real venvs (tiny wheels,
real uv): each document validates against its published schema and carries the facts a
script acts on; standard output holds the document alone, whatever the installer prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from envguard.cli import app
from envguard.guard.report import GuardReport, HistoryReport, ProtectReport, UndoReport
from factories import UV, envguard_cli, make_venv, run

runner = CliRunner()
SCHEMAS = Path(__file__).resolve().parents[2] / "schema"
M = TypeVar("M", bound=BaseModel)


def _install(wh: Path, *reqs: str, uv: str = UV) -> list[str]:
    return ["--", uv, "pip", "install", "--no-index", "--find-links", str(wh), *reqs]


def _freeze(venv: Path) -> str:
    return run([UV, "pip", "freeze", "--python", str(venv)]).stdout


def _document(model: type[M], kind: str, text: str) -> M:
    """``text`` as ``model`` (extra keys refused); its keys are the published schema's
    (schema/*.json is the models' schema: tests/test_schemas.py holds them together)."""
    found = model.model_validate_json(text)
    published = json.loads((SCHEMAS / f"{kind}.v1.json").read_text())
    doc = json.loads(text)
    assert set(published["required"]) <= set(doc) <= set(published["properties"])
    assert doc["schema"] == f"envguard.{kind}" and doc["schema_version"] == 1
    return found


def _guard(venv: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["guard", "--venv", str(venv), "--format", "json", *args])
    return result.exit_code, result.stdout, result.stderr


def test_a_refused_install_says_what_blocks_it(stack: tuple[Path, Path]) -> None:
    venv, wh = stack
    before = _freeze(venv)
    code, out, err = _guard(venv, *_install(wh, "sglang"))
    assert code == 1, err
    report = _document(GuardReport, "guard", out)
    assert report.blocking and report.blocked_by == ("torch",)
    assert not report.ran and not report.preview
    assert report.exit_code is None and report.record is None
    assert report.against == "the venv as it is" and report.snapshot is None
    assert report.command[1:] == ("pip", "install", "--no-index", "--find-links", str(wh), "sglang")
    torch = next(c for c in report.changes if c.name == "torch")
    assert (torch.before, torch.after, torch.kind) == ("2.13.0+cpu", "2.14.1", "upgraded")
    assert torch.severity == "critical" and torch.blocking
    assert torch.pulled_in_by == ("sglang",)
    numpy = next(c for c in report.changes if c.name == "numpy")
    assert numpy.kind == "downgraded" and not numpy.blocking
    assert report.verdict[0] == "torch 2.13.0+cpu -> 2.14.1"
    # The refusal and its hint stay on stderr, for the person.
    assert "--allow torch" in err
    assert _freeze(venv) == before


def test_a_preview_is_a_document_and_runs_nothing(stack: tuple[Path, Path]) -> None:
    venv, wh = stack
    code, out, err = _guard(venv, "--preview", *_install(wh, "sglang"))
    assert code == 1, err
    report = _document(GuardReport, "guard", out)
    assert report.preview and report.blocking and not report.ran
    code, out, err = _guard(venv, "--preview", *_install(wh, "six"))
    assert code == 0, err
    report = _document(GuardReport, "guard", out)
    assert report.preview and not report.blocking and not report.ran
    assert [(c.name, c.kind, c.after) for c in report.changes] == [("six", "added", "1.17.0")]
    assert "six" not in _freeze(venv)


def test_an_allowed_install_runs_and_history_lists_it(stack: tuple[Path, Path]) -> None:
    venv, wh = stack
    code, out, err = _guard(venv, "--allow", "torch", *_install(wh, "sglang"))
    assert code == 0, err
    report = _document(GuardReport, "guard", out)
    assert report.ran and report.exit_code == 0 and report.record == 1
    assert not report.blocking and report.blocked_by == ()
    assert next(c for c in report.changes if c.name == "torch").blocking is False
    assert report.change is not None and "change torch 2.13.0+cpu -> 2.14.1" in report.change
    assert "torch==2.14.1" in _freeze(venv)
    result = runner.invoke(app, ["history", "--venv", str(venv), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    history = _document(HistoryReport, "history", result.stdout)
    assert history.venv == str(venv)
    (record,) = history.records
    assert record.number == 1 and record.allowed == ("torch",) and record.exit_code == 0
    assert record.command == report.command and record.change == report.change
    assert record.planned == report.headline


def test_installer_output_goes_to_stderr_and_its_exit_code_passes_through(
    stack: tuple[Path, Path], tmp_path: Path
) -> None:
    """A real process: the installer writes to the file descriptors envguard hands it."""
    venv, wh = stack
    loud = tmp_path / "bin" / "uv"  # uv's dry run as is; the install says things and fails
    loud.parent.mkdir()
    loud.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" --dry-run "*) exec {UV} "$@";; esac\n'
        "echo 'installer chatter on stdout'\n"
        f'{UV} "$@"\n'
        "exit 3\n"
    )
    loud.chmod(0o755)
    argv = ["guard", "--venv", str(venv), "--format", "json", *_install(wh, "six", uv=str(loud))]
    proc = envguard_cli(*argv, cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    report = _document(GuardReport, "guard", proc.stdout)  # the whole of stdout
    assert report.ran and report.exit_code == 3 and report.record == 1
    assert report.change == "add 1 package"
    assert "installer chatter on stdout" in proc.stderr
    assert "six==1.17.0" in _freeze(venv)
    history = runner.invoke(app, ["history", "--venv", str(venv), "--format", "json"])
    assert _document(HistoryReport, "history", history.stdout).records[0].exit_code == 3


def test_bad_input_prints_no_document(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    code, out, err = _guard(venv, "uv pip install six; touch pwned")
    assert code == 2 and out == "" and "holds shell syntax" in err
    result = runner.invoke(app, ["history", "--venv", str(venv), "--format", "json"])
    assert result.exit_code == 0
    assert _document(HistoryReport, "history", result.stdout).records == ()


def test_protect_check_and_off_say_the_files(tmp_path: Path) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)

    def protect(*args: str) -> tuple[int, ProtectReport]:
        result = runner.invoke(app, ["protect", "--venv", str(venv), "--format", "json", *args])
        return result.exit_code, _document(ProtectReport, "protect", result.stdout)

    code, found = protect("--check")
    assert code == 1 and not found.protected and found.files == ()
    code, done = protect()
    assert code == 0 and done.protected and done.action == "protect"
    assert "bin/uv" in done.files and all((venv / f).exists() for f in done.files)
    (venv / "bin" / "uv").write_text("#!/bin/sh\n")
    code, found = protect("--check")
    assert code == 1 and found.protected and found.edited == ("bin/uv",)
    code, removed = protect("--off")
    # A bin/uv that is no longer the shim (uv's own, installed over it) is not protect's.
    assert code == 0 and not removed.protected
    assert set(removed.files) == set(done.files) - {"bin/uv"}
    assert removed.edited == ("bin/uv",) and "no longer protect's uv shim" in removed.notes[0]
    assert not any((venv / f).exists() for f in removed.files)
    assert (venv / "bin" / "uv").read_text() == "#!/bin/sh\n"


@pytest.mark.slow
def test_undo_says_what_it_went_back_before(stack: tuple[Path, Path]) -> None:
    venv, wh = stack
    before = _freeze(venv)
    code, _, err = _guard(venv, *_install(wh, "six"))
    assert code == 0, err
    result = runner.invoke(
        app,
        ["undo", "--venv", str(venv), "--find-links", str(wh), "--offline", "--format", "json"],
    )
    assert result.exit_code == 0, result.stderr
    undone = _document(UndoReport, "undo", result.stdout)
    assert undone.target.number == 1 and undone.record == 2
    assert undone.target.command[1:3] == ("pip", "install")
    assert undone.restored == "remove 1 package"
    assert undone.venv == str(venv) and undone.packages == 2
    assert _freeze(venv) == before
