"""The guard learns where the install will really write from every setting its installer
reads (uv's and pip's configuration files at every level, their variables in every spelling
pip accepts) and refuses, naming the source, when that is not the guarded venv. The uv cases
are checked against uv itself (`--show-settings`): each file the test writes is one uv
really reads."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.guard import journal
from envguard.guard.reqfile import pip_name
from factories import UV, make_venv, run

runner = CliRunner()


def guard(venv: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["guard", "--venv", str(venv), *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def uv_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(guarded venv, another venv): uv reads its configuration files again (the suite
    turns them off), the user's and the system's in folders of the test's own."""
    venv, other = tmp_path / "guarded", tmp_path / "other"
    make_venv(venv)
    make_venv(other)
    monkeypatch.delenv("UV_NO_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "user-config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "system-config"))
    work = tmp_path / "project" / "sub"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    return venv, other


def _uv_settings(venv: Path, *args: str) -> str:
    """What uv itself would use for `uv pip install six` here, as the install runs it."""
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    out = subprocess.run(
        [UV, "pip", "install", "--show-settings", *args, "six"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


@pytest.mark.parametrize(
    ("where", "key"),
    [
        ("uv.toml", "python"),  # the working folder
        ("../uv.toml", "python"),  # a parent folder
        ("pyproject.toml", "target"),  # [tool.uv.pip] of the nearest pyproject.toml
        ("$UV_CONFIG_FILE", "prefix"),
        ("--config-file", "python"),
        ("$XDG_CONFIG_HOME/uv/uv.toml", "system"),  # the user's
        ("$XDG_CONFIG_DIRS/uv/uv.toml", "python"),  # the system's
    ],
)
def test_a_uv_config_file_that_installs_elsewhere_is_refused_naming_it(
    uv_configured: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, where: str, key: str
) -> None:
    venv, other = uv_configured
    value = {"python": str(other / "bin" / "python"), "target": str(other), "prefix": str(other)}
    setting = f"{key} = true" if key == "system" else f'{key} = "{value[key]}"'
    extra: tuple[str, ...] = ()
    if where == "pyproject.toml":
        path, text = Path(where), f"[tool.uv.pip]\n{setting}\n"
    else:
        path = Path(os.path.expandvars(where.replace("--config-file", "chosen.toml")))
        text = f"[pip]\n{setting}\n"
    if where == "$UV_CONFIG_FILE":
        path = Path("elsewhere.toml")
        monkeypatch.setenv("UV_CONFIG_FILE", str(path.absolute()))
    if where == "--config-file":
        extra = ("--config-file", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    # uv itself reads it: the install, run as typed, would write elsewhere.
    shown = "system: true" if key == "system" else value[key]
    assert shown in _uv_settings(venv, *extra)
    code, out, err = guard(venv, "--", UV, "pip", "install", *extra, "six")
    assert code == 2 and out == "", err
    shown = "true" if key == "system" else value[key]
    assert err.startswith(
        f"error: uv config file {os.path.abspath(path)}"
        f" sets {key}={shown}, which is not the guarded venv {venv}"
    ), err
    assert journal.records(venv) == []


def test_a_uv_config_file_that_names_the_guarded_venv_is_accepted(
    uv_configured: tuple[Path, Path], stack_wheels: Path
) -> None:
    venv, other = uv_configured
    Path("uv.toml").write_text(f'[pip]\npython = "{venv / "bin" / "python"}"\n')
    code, _, err = guard(
        venv, "--", UV, "pip", "install", "--no-index", "--find-links", str(stack_wheels), "six"
    )
    assert code == 0, err
    assert "six==1.17.0" in run([UV, "pip", "freeze", "--python", str(venv)]).stdout
    assert "six" not in run([UV, "pip", "freeze", "--python", str(other)]).stdout


@pytest.fixture
def stack_wheels(tmp_path: Path) -> Path:
    from envguard.testing import make_wheel

    wh = tmp_path / "wh"
    make_wheel(wh, "six", "1.17.0")
    return wh


@pytest.mark.parametrize("variable", ["UV_PYTHON", "UV_SYSTEM_PYTHON"])
def test_uv_variables_that_retarget_never_reach_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack_wheels: Path, variable: str
) -> None:
    """uv's own variables are exact names: left out of the installer's environment, so the
    install goes where the dry run looked."""
    venv, other = tmp_path / "guarded", tmp_path / "other"
    make_venv(venv)
    make_venv(other)
    monkeypatch.setenv(variable, str(other / "bin" / "python") if variable == "UV_PYTHON" else "1")
    code, _, err = guard(
        venv, "--", UV, "pip", "install", "--no-index", "--find-links", str(stack_wheels), "six"
    )
    assert code == 0, err
    assert "six" in run([UV, "pip", "freeze", "--python", str(venv)]).stdout
    assert "six" not in run([UV, "pip", "freeze", "--python", str(other)]).stdout


# pip: the venv's own pip is asked (`pip config debug`); pip_venv (conftest) is made once
# per module, and nothing here changes it (every case is refused before anything runs).


@pytest.fixture
def pip_configured(
    pip_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, Path]]:
    """(guarded venv with pip, another venv): pip's own configuration files moved to the
    test's folders (user: $HOME and $XDG_CONFIG_HOME; global: $XDG_CONFIG_DIRS)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    venv = pip_venv / "guarded"
    yield venv, pip_venv / "other"
    (venv / "pip.conf").unlink(missing_ok=True)


def _pip(venv: Path, *args: str) -> tuple[int, str, str]:
    return guard(venv, "--", str(venv / "bin" / "python"), "-m", "pip", *args)


@pytest.mark.parametrize(
    ("level", "section", "key"),
    [
        ("$PIP_CONFIG_FILE", "install", "target"),
        ("site", "global", "prefix"),  # the venv's own pip.conf
        ("$XDG_CONFIG_HOME/pip/pip.conf", "global", "user"),
        ("$HOME/.pip/pip.conf", "install", "root"),  # the user's, legacy
        ("$XDG_CONFIG_DIRS/pip/pip.conf", "global", "python"),  # global
    ],
)
def test_a_pip_config_file_at_any_level_that_installs_elsewhere_is_refused(
    pip_configured: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    level: str,
    section: str,
    key: str,
) -> None:
    venv, other = pip_configured
    value = "yes" if key == "user" else str(other / "bin" / "python" if key == "python" else other)
    if level == "site":
        path = venv / "pip.conf"
    elif level == "$PIP_CONFIG_FILE":
        path = Path("chosen.conf").absolute()
        monkeypatch.setenv("PIP_CONFIG_FILE", str(path))
    else:
        path = Path(os.path.expandvars(level))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[{section}]\n{key} = {value}\n")
    code, out, err = _pip(venv, "install", "six")
    assert code == 2 and out == "", err
    assert err.startswith(
        f"error: pip config file {path} sets {key}={value}, which is not the guarded venv {venv}"
    ), err


def test_pip_config_file_set_to_the_null_device_means_no_config_file_as_for_pip(
    pip_configured: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """PIP_CONFIG_FILE=/dev/null is pip's documented way to read no configuration file:
    guard was refusing every pip install then (`/dev/null: a pip config file in dev/`).
    pip reads none, the user's one that would install elsewhere included, and so does
    guard: the install is previewed as pip would run it."""
    from envguard.testing import make_wheel

    venv, other = pip_configured
    user = tmp_path / "home" / ".config" / "pip" / "pip.conf"
    user.parent.mkdir(parents=True)
    user.write_text(f"[install]\ntarget = {other}\n")  # what pip no longer reads
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    make_wheel(tmp_path / "wh", "six", "1.17.0")
    pip = ["-m", "pip", "install", "--no-index", "--find-links", str(tmp_path / "wh"), "six"]
    code, out, err = guard(venv, "--preview", "--", str(venv / "bin" / "python"), *pip)
    assert code == 0 and "error" not in err, err
    assert out.startswith("this install would add 1 package")


@pytest.mark.parametrize(
    "text",
    [
        "[global]\ntarget =\n  {other}\n",  # the value on the next line
        "[install]\nprefix = \n\n  {other}\n",  # after a blank one
        "[global]\ntarget =\n  site:\n  {other}\n",  # as a header pip prints
        "[global]\ntarget =\n  user:\n",
    ],
)
def test_a_pip_config_value_over_several_lines_is_refused(
    pip_configured: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """configparser reads a value's continuation lines, and `pip config debug` prints them
    at the left margin: the target read as empty, and pip installed into a folder named
    by the rest (outside the venv), exit 0."""
    venv, other = pip_configured
    path = Path("chosen.conf").absolute()
    path.write_text(text.format(other=other))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(path))
    code, out, err = _pip(venv, "install", "six")
    assert code == 2 and out == "", err
    assert err.startswith(f"error: {path}: a pip config file holds a value over several"), err
    assert err.count("\n") == 2 and "Traceback" not in err  # error and hint


@pytest.mark.parametrize(
    "variable",
    ["PIP_TARGET", "PIP_target", "PIP___TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_python"],
)
def test_a_pip_variable_in_any_spelling_that_installs_elsewhere_is_refused(
    pip_configured: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    venv, other = pip_configured
    value = str(other / "bin" / "python") if pip_name(variable) == "python" else str(other)
    monkeypatch.setenv(variable, value)
    code, _, err = _pip(venv, "install", "six")
    assert code == 2
    assert err.startswith(
        f"error: {variable} sets {pip_name(variable)}={value}, which is not the guarded venv"
    ), err


def test_pip_user_set_false_and_python_naming_the_venv_pass(
    pip_configured: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    venv, _ = pip_configured
    monkeypatch.setenv("PIP_USER", "no")
    monkeypatch.setenv("PIP_python", str(venv / "bin" / "python"))
    (venv / "pip.conf").write_text(f"[global]\nprefix = {venv}\n")
    code, out, err = _pip(venv, "install", "--no-index", "--find-links", str(venv), "pip")
    assert code == 0, err
    assert out.startswith("this install would change no package")


def test_pip_reads_variable_names_as_the_guard_does() -> None:
    """The names pip's own configuration gives the variables."""
    for variable, name in (
        ("PIP_TARGET", "target"),
        ("PIP_target", "target"),
        ("PIP___TARGET", "target"),
        ("PIP_requirement", "requirement"),
        ("PIP_NO_BUILD_ISOLATION", "no-build-isolation"),
    ):
        assert pip_name(variable) == name


def test_the_guarded_venv_named_on_the_command_line_wins_over_a_config_files_python(
    uv_configured: tuple[Path, Path], stack_wheels: Path
) -> None:
    """uv takes --python over its files' (checked with uv itself): the install goes to the
    guarded venv, so the file's other interpreter does not refuse it."""
    venv, other = uv_configured
    Path("uv.toml").write_text(f'[pip]\npython = "{other / "bin" / "python"}"\n')
    named = ("--python", str(venv / "bin" / "python"))
    assert str(other) not in _uv_settings(venv, *named)
    code, _, err = guard(
        venv,
        "--",
        UV,
        "pip",
        "install",
        *named,
        "--no-index",
        "--find-links",
        str(stack_wheels),
        "six",
    )
    assert code == 0, err
    assert "six==1.17.0" in run([UV, "pip", "freeze", "--python", str(venv)]).stdout
    assert "six" not in run([UV, "pip", "freeze", "--python", str(other)]).stdout


def test_a_config_file_that_is_the_environment_is_never_shown(
    pip_configured: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip quotes a config file it cannot parse: PIP_CONFIG_FILE=/proc/self/environ, or the
    venv's pip.conf linked there, would print the job's variables."""
    venv, _ = pip_configured
    monkeypatch.setenv("CI_JOB_NOTE", "leaked-value-4711")
    with monkeypatch.context() as mp:
        mp.setenv("PIP_CONFIG_FILE", "/proc/self/environ")
        code, out, err = _pip(venv, "install", "six")
    assert code == 2
    assert "PIP_CONFIG_FILE /proc/self/environ: a pip config file in proc/; not read" in err
    assert "leaked-value-4711" not in out + err
    (venv / "pip.conf").symlink_to("/proc/self/environ")
    code, out, err = _pip(venv, "install", "six")
    assert code == 2
    assert err.startswith("error: the venv's pip could not read its configuration"), err
    assert "leaked-value-4711" not in out + err


def test_a_uv_config_file_under_proc_is_not_read(
    uv_configured: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    venv, _ = uv_configured
    monkeypatch.setenv("UV_CONFIG_FILE", "/proc/self/environ")
    code, _, err = guard(venv, "--", UV, "pip", "install", "six")
    assert code == 2
    assert "/proc/self/environ: a uv config file in proc/; not read" in err
