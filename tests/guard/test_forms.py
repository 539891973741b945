"""guard takes commands as users write them: its options after the snapshot's name, an
interpreter named with --python when it is the guarded venv's; any other target refused
with a hint in the words of the installer typed."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from envguard.cli import app
from envguard.cli.guard import _options_first
from factories import UV, make_venv, run

runner = CliRunner()


def _freeze(venv: Path) -> str:
    return run([UV, "pip", "freeze", "--python", str(venv)]).stdout


def _snapshot(venv: Path, name: str) -> None:
    made = runner.invoke(
        app, ["snapshot", "--python", str(venv / "bin" / "python"), "--name", name]
    )
    assert made.exit_code == 0, made.stderr


@pytest.mark.parametrize("dashes", [True, False])
def test_options_after_the_snapshot_name_are_guards(stack: tuple[Path, Path], dashes: bool) -> None:
    venv, wh = stack
    _snapshot(venv, "good")
    install = [UV, "pip", "install", "--no-index", "--find-links", str(wh), "six"]
    words = ["guard", "good", "--venv", str(venv), "--timeout", "60", "--allow", "six"]
    result = runner.invoke(app, [*words, *(["--"] if dashes else []), *install])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("this install would add 1 package (against snapshot good)")
    assert "six==1.17.0" in _freeze(venv)


def test_every_option_of_guard_is_read_after_the_snapshot_name() -> None:
    """The reordering reads what the command declares: every option, in every spelling."""
    command = typer.main.get_command(app).commands["guard"]  # type: ignore[attr-defined]
    ctx = command.make_context("guard", ["--", "uv"], resilient_parsing=True)
    params = command.get_params(ctx)
    tail = ["--", "uv", "pip", "install", "--timeout", "9", "six"]
    for param in params:
        if param.param_type_name != "option":
            continue
        flag = param.is_flag or param.count
        for spelled in (*param.opts, *param.secondary_opts):
            given = [spelled] if flag else [spelled, "x"]
            assert _options_first(params, ["good", *given, *tail]) == [*given, "good", *tail]
            assert _options_first(params, [*given, "good", *tail]) == [*given, "good", *tail]
    # The install command's own options stay its own.
    plain = ["uv", "pip", "install", "--timeout", "9", "six"]
    assert _options_first(params, plain) == plain


def test_python_naming_the_guarded_venv_is_accepted_and_any_other_refused(
    stack: tuple[Path, Path], tmp_path: Path
) -> None:
    venv, wh = stack
    other = tmp_path / "other"
    make_venv(other)
    base = ["guard", "--venv", str(venv), "--", UV, "pip", "install", "--no-index"]
    for spelled in (
        ["--python", str(venv / "bin" / "python")],
        [f"--python={venv}"],
        ["-p", str(venv)],
    ):
        result = runner.invoke(app, [*base, *spelled, "--find-links", str(wh), "six"])
        assert result.exit_code == 0, result.stderr
        assert "six==1.17.0" in _freeze(venv)
        run([UV, "pip", "uninstall", "--python", str(venv), "six"])
    for spelled in (["--python", str(other / "bin" / "python")], ["-p", "3.11"]):
        result = runner.invoke(app, [*base, *spelled, "--find-links", str(wh), "six"])
        assert result.exit_code == 2
        assert result.stderr.startswith(f"error: --python {spelled[1]}: the command installs")
        assert "six" not in _freeze(other) + _freeze(venv)


def test_pip_python_naming_the_guarded_venv_is_accepted(pip_venv: Path) -> None:
    venv = pip_venv / "guarded"
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "--python", python, "install", "--no-index"]
    result = runner.invoke(
        app,
        ["guard", "--venv", str(venv), "--preview", "--", *pip, "--find-links", str(venv), "pip"],
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("this install would change no package")
    other = str(pip_venv / "other" / "bin" / "python")
    refused = runner.invoke(
        app,
        [
            "guard",
            "--venv",
            str(venv),
            "--",
            python,
            "-m",
            "pip",
            "--python",
            other,
            "install",
            "six",
        ],
    )
    assert refused.exit_code == 2
    assert "installs into another interpreter's environment" in refused.stderr


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        (["pip", "install", "--target", "/x", "six"], "run the pip command without envguard guard"),
        (["uv", "pip", "install", "--target", "/x", "six"], "run the uv command without"),
        (["pip", "install", "--user", "six"], "to install into your user site-packages"),
        (["uv", "pip", "install", "--system", "six"], "to install into the system Python"),
    ],
)
def test_a_target_refusals_hint_fits_what_was_typed(
    tmp_path: Path, typed: list[str], said: str
) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    result = runner.invoke(app, ["guard", "--venv", str(venv), "--", *typed])
    assert result.exit_code == 2
    hint = result.stderr.splitlines()[-1]
    assert hint.startswith("hint: drop ") and said in hint, hint
    assert "--venv" not in hint


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (["conda", "install", "six"], "conda"),
        (["sudo", "pip", "install", "six"], "sudo"),
        (["/usr/bin/env", "pip", "install", "six"], "/usr/bin/env"),
        (["pipx", "install", "six"], "pipx"),
    ],
)
@pytest.mark.parametrize("before", [[], ["--format", "json"], ["--preview", "--fail-on=info"]])
def test_what_follows_the_double_dash_is_the_command_whatever_its_first_word(
    tmp_path: Path, command: list[str], named: str, before: list[str]
) -> None:
    """click drops the "--" that follows guard's options; the first word after it was then
    taken for a snapshot when it was not a known installer: `-- sudo pip install six` said
    "sudo: no such snapshot", `-- /usr/bin/env pip ...` read /usr/bin/env as one, and
    `-- conda install six` named the installer 'install'."""
    venv = tmp_path / ".venv"
    make_venv(venv)
    result = runner.invoke(app, ["guard", "--venv", str(venv), *before, "--", *command])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(
        f"error: envguard guard does not know the installer '{named}'\n"
    ), result.stderr
    assert "snapshot" not in result.stderr and "cannot read" not in result.stderr
