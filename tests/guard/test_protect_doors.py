"""protect by mechanism: every way of starting pip in a protected venv reaches the guard,
pip's other commands run untouched, uv's project commands are routed or refused, and the
shim survives any path (real venvs, real pip and uv, processes bounded by a timeout)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.guard import hook, nesting
from factories import UV, make_venv, run, uv_install

runner = CliRunner()
TARGET = "--target: envguard guard installs into the venv it guards"


def _with_pip(venv: Path) -> None:
    import ensurepip

    uv_install(venv, Path(ensurepip.__file__).parent / "_bundled", "pip")


def _active(venv: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (nesting.MARKER, nesting.TOKEN)}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{Path(UV).parent}{os.pathsep}{env['PATH']}"
    env["PIP_NO_INDEX"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def _freeze(venv: Path) -> str:
    return run([UV, "pip", "freeze", "--python", str(venv)]).stdout


@pytest.fixture
def protected(tmp_path: Path) -> Path:
    venv = tmp_path / ".venv"
    make_venv(venv)
    _with_pip(venv)
    result = runner.invoke(app, ["protect", "--venv", str(venv)])
    assert result.exit_code == 0, result.stderr
    return venv


def test_a_start_of_the_venvs_python_loads_the_hook_compiled_and_imports_nothing(
    protected: Path, tmp_path: Path
) -> None:
    """protect byte-compiles the hook: a Python that writes no bytecode (this suite's, a
    container's) loads it from its .pyc, never compiling it at each start; and at start the
    hook imports nothing (the modules loaded are those of an unprotected start, and it)."""
    python = str(protected / "bin" / "python")
    env = _active(protected, PYTHONDONTWRITEBYTECODE="1")
    proc = _run([python, "-v", "-c", "pass"], env, tmp_path)
    pyc = next(protected.glob("lib/python3*/site-packages/__pycache__/_envguard_protect.*.pyc"))
    assert f"# code object from '{pyc}'" in proc.stderr
    listed = "import sys; print(' '.join(sorted(sys.modules)))"
    on = _run([python, "-c", listed], env, tmp_path).stdout.split()
    off = _run([python, "-S", "-c", "import site; " + listed], env, tmp_path).stdout.split()
    assert set(on) - set(off) == {"_envguard_protect"}


def test_every_way_of_starting_pip_reaches_the_guard(protected: Path, tmp_path: Path) -> None:
    """Each start form asks for `install --target`: pip alone would install into the
    folder; the guard refuses the option (exit 2), so a refusal proves the guard saw it."""
    venv = protected
    python = str(venv / "bin" / "python")
    bin_ = venv / "bin"
    pip3x = next(p.name for p in bin_.glob("pip3.*"))
    install = ["install", "--target", str(tmp_path / "elsewhere"), "six"]
    runpy = "import runpy, sys; sys.argv[1:] = {!r}; runpy.run_module('pip', run_name='__main__')"
    for argv in (
        [python, "-m", "pip", *install],
        [python, "-m", "pip.__main__", *install],
        [python, "-c", runpy.format(install)],
        [python, "-W", "ignore", "-m", "pip", *install],
        [python, "-I", "-m", "pip", *install],
        [str(bin_ / "pip"), *install],
        [str(bin_ / "pip3"), *install],
        [str(bin_ / pip3x), *install],
    ):
        proc = _run(argv, _active(venv), tmp_path)
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        assert TARGET in proc.stderr, argv
    assert not (tmp_path / "elsewhere").exists()
    # An uninstall, pip's own options before it: the guard previews it and records it.
    argv = [str(bin_ / "pip"), "-v", "--isolated", "uninstall", "-y", "six"]
    proc = _run(argv, _active(venv), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "recorded #1: no package change" in proc.stdout + proc.stderr


def test_pips_other_commands_run_untouched(protected: Path, tmp_path: Path) -> None:
    """The word `install` as an argument is not an install: pip's own answers, pip's own
    exit codes, no word from envguard."""
    venv = protected
    python = str(venv / "bin" / "python")
    for args, code, said in (
        (["help", "install"], 0, "Usage:"),
        (["show", "install"], 1, "Package(s) not found: install"),
        (["download", "install", "-d", str(tmp_path / "d")], 1, "No matching distribution"),
        (["list"], 0, "pip"),
        (["install", "--help"], 0, "Usage:"),
        # A dry run changes nothing: pip's own parsed options say so, however spelled
        # (optparse takes `--dry`); the guard refused them (exit 2).
        (["install", "--dry-run", "six"], 1, "No matching distribution"),
        (["install", "--dry", "six"], 1, "No matching distribution"),
        (["uninstall", "--dry-run", "six"], 2, "no such option: --dry-run"),
    ):
        proc = _run([python, "-m", "pip", *args], _active(venv), tmp_path)
        assert proc.returncode == code, (args, proc.stdout, proc.stderr)
        assert said in proc.stdout + proc.stderr, args
        assert "envguard" not in proc.stdout + proc.stderr, args
    proc = _run(["uv", "pip", "show", "install"], _active(venv), tmp_path)
    assert proc.returncode == 1 and "not found for: install" in proc.stderr, proc.stderr
    assert "envguard" not in proc.stderr
    proc = _run(["uv", "pip", "install", "--dry-run", "six"], _active(venv), tmp_path)
    assert proc.returncode == 1 and "six" in proc.stderr, proc.stderr  # uv's own answer
    assert "envguard" not in proc.stderr and "six" not in _freeze(venv)


def test_pip_run_from_a_wheel_is_watched_too(protected: Path, tmp_path: Path) -> None:
    """pip imported from a zip (its wheel on PYTHONPATH, as ensurepip and virtualenv run
    it): one loader for all its modules, only the command module is armed; `pip list`
    runs, an install goes to the guard."""
    import ensurepip

    wheel = next((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    env = _active(protected, PYTHONPATH=str(wheel))
    python = str(protected / "bin" / "python")
    proc = _run([python, "-m", "pip", "--version"], env, tmp_path)
    assert proc.returncode == 0 and str(wheel) in proc.stdout, proc.stderr
    proc = _run([python, "-m", "pip", "list", "--format", "freeze"], env, tmp_path)
    assert proc.returncode == 0 and "pip==" in proc.stdout, proc.stderr
    proc = _run([python, "-m", "pip", "install", "--target", "t", "six"], env, tmp_path)
    assert proc.returncode == 2 and TARGET in proc.stderr, proc.stderr


def test_the_hook_never_imports_from_the_working_folder(protected: Path, tmp_path: Path) -> None:
    """A folder named envguard (and one named as the hook) where pip is started: never
    imported, by the hook nor by the guard it starts."""
    venv = protected
    work = tmp_path / "work"
    planted = tmp_path / "planted"
    for name in ("envguard", "_envguard_protect"):
        (work / name).mkdir(parents=True)
        for module in ("__init__.py", "__main__.py"):
            (work / name / module).write_text(f"open({str(planted)!r}, 'a').write('x')\n")
    python = str(venv / "bin" / "python")
    proc = _run([python, "-m", "pip", "install", "--target", "t", "six"], _active(venv), work)
    assert proc.returncode == 2 and TARGET in proc.stderr, proc.stderr
    proc = _run(["uv", "pip", "install", "--target", "t", "six"], _active(venv), work)
    assert proc.returncode == 2 and TARGET in proc.stderr, proc.stderr
    assert not planted.exists()


def test_python_without_site_cannot_reach_the_venvs_pip(protected: Path, tmp_path: Path) -> None:
    """`python -S` runs no .pth, so no hook, and no site: the venv's site-packages is not
    on sys.path, so its pip is not there to run (and sys.prefix is the base interpreter's,
    so a pip brought in by PYTHONPATH would install there, not into the venv: protect
    cannot see it, docs/protect.md says so, and `protect --check` names a pin it broke)."""
    venv = protected
    before = _freeze(venv)
    python = str(venv / "bin" / "python")
    for argv in (
        [python, "-S", "-m", "pip", "install", "six"],
        [python, "-S", "-c", "import runpy; runpy.run_module('pip', run_name='__main__')"],
    ):
        proc = _run(argv, _active(venv), tmp_path)
        assert proc.returncode == 1 and "No module named pip" in proc.stderr, proc.stderr
    proc = _run([python, "-S", "-c", "import sys; print(sys.prefix)"], _active(venv), tmp_path)
    assert proc.stdout.strip() != str(venv)
    assert _freeze(venv) == before


@pytest.mark.slow
def test_uvs_project_commands_are_guarded_or_refused(project: tuple[Path, Path]) -> None:
    """The protected venv is the project's environment: a `uv run` (after `uv lock` too)
    whose sync would swap torch is refused by the guard, `uv run --with` and `uv venv`
    over it are refused; a run with nothing to sync runs."""
    venv, _ = project
    cwd = Path.cwd()
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    env = _active(venv)
    proc = _run(["uv", "run", "python", "-c", "print('ran')"], env, cwd)
    assert proc.returncode == 0 and "ran" in proc.stdout, proc.stderr
    pyproject = cwd / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"torch>=2.13,<2.14"', '"sglang"'))
    proc = _run(["uv", "lock"], env, cwd)
    assert proc.returncode == 0, proc.stderr
    for argv in (
        ["uv", "run", "python", "-c", "print('ran')"],
        ["uv", "--color", "never", "run", "--frozen", "python", "-c", "print('ran')"],
        ["uv", "sync"],
    ):
        proc = _run(argv, env, cwd)
        assert proc.returncode == 1, (argv, proc.stdout, proc.stderr)
        assert "torch" in proc.stdout and "refused" in proc.stderr, argv
        assert "ran" not in proc.stdout
    for argv in (
        ["uv", "run", "--with", "sglang", "python", "-c", "pass"],
        ["uv", "venv", "--clear"],
        ["uv", "venv", "--clear", str(venv)],
    ):
        proc = _run(argv, env, cwd)
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("envguard protect: refused: `uv "), proc.stderr
    assert "torch==2.13.0+cpu" in _freeze(venv) and "sglang" not in _freeze(venv)
    check = runner.invoke(app, ["protect", "--check", "--venv", str(venv)])
    assert check.exit_code == 0, check.stdout


@pytest.mark.parametrize("where", ["with blank", "long"])
def test_the_shim_survives_any_path(tmp_path: Path, where: str) -> None:
    """A blank in the venv's path, or a path past 300 characters: the shim runs uv and
    routes an install to the guard (no exit 127, no hang)."""
    parent = tmp_path / "my project" if where == "with blank" else tmp_path
    if where == "long":
        parent = parent.joinpath(*["d" * 60] * 5)
    venv = parent / ".venv"
    make_venv(venv)
    assert len(str(venv)) > (300 if where == "long" else 0)
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    proc = _run(["uv", "--version"], _active(venv), parent)
    assert proc.returncode == 0 and proc.stdout.startswith("uv "), proc.stderr
    proc = _run(["uv", "pip", "install", "--target", "t", "six"], _active(venv), parent)
    assert proc.returncode == 2 and TARGET in proc.stderr, proc.stderr


@pytest.mark.slow
def test_check_says_when_the_venv_no_longer_holds_its_pins(stack: tuple[Path, Path]) -> None:
    venv, wh = stack
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    uv_install(venv, wh, "torch==2.14.1")  # uv from elsewhere: past the protection
    result = runner.invoke(app, ["protect", "--check", "--venv", str(venv)])
    assert result.exit_code == 1, result.stdout
    assert "not as pinned: torch==2.13.0+cpu (installed: 2.14.1)" in result.stdout
    result = runner.invoke(app, ["protect", "--check", "--venv", str(venv), "--format", "json"])
    assert result.exit_code == 1
    assert '"torch==2.13.0+cpu (installed: 2.14.1)"' in result.stdout


@pytest.mark.parametrize(
    ("args", "how"),
    [
        (["pip", "show", "install"], "uv"),
        (["pip", "--color", "never", "install", "six"], "guard"),
        (["--color", "never", "pip", "list", "install"], "uv"),
        (["lock"], "uv"),
        (["run", "--no-sync", "python"], "uv"),
        (["run", "--with=six", "python"], "refuse"),
        (["tool", "run", "--with", "six", "ruff"], "uv"),
        (["venv", "elsewhere"], "uv"),
        (["pip", "install", "--dry-run", "six"], "uv"),
        (["pip", "uninstall", "six", "--dry-run"], "uv"),
        (["sync", "--dry-run"], "uv"),
        (["add", "--dry-run", "six"], "guard"),
    ],
)
def test_the_shim_reads_uvs_command_not_its_words(
    tmp_path: Path, args: list[str], how: str
) -> None:
    venv = tmp_path / ".venv"
    venv.mkdir()
    hook.VENV = str(venv)
    try:
        assert hook.uv_route(args, str(tmp_path), {})[0] == how
    finally:
        hook.VENV = ""


def test_check_names_a_hook_and_shim_an_earlier_envguard_wrote(tmp_path: Path) -> None:
    """A venv protected by an earlier envguard (its hook let a marker exported by hand
    through): its files are as that one wrote them (the manifest agrees), and --check says
    they are not this one's, until protect writes them again."""
    import hashlib
    import json

    venv = tmp_path / ".venv"
    make_venv(venv)
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    hook_file = next(venv.glob("lib/python3*/site-packages/_envguard_protect.py"))
    earlier = {
        hook_file: hook_file.read_text().replace("def inside_guard():", "def _unused():", 1),
        venv / "bin" / "uv": '#!/bin/sh\n# envguard protect: an earlier shim\nexec uv "$@"\n',
    }
    manifest = venv / "envguard-protect.json"
    data = json.loads(manifest.read_text())
    for path, text in earlier.items():
        path.write_text(text)
        data["files"][str(path.relative_to(venv))] = hashlib.sha256(text.encode()).hexdigest()
    manifest.write_text(json.dumps(data))
    result = runner.invoke(app, ["protect", "--check", "--venv", str(venv)])
    assert result.exit_code == 1, result.stdout
    assert f"an earlier envguard's: {hook_file}" in result.stdout
    assert f"an earlier envguard's: {venv / 'bin' / 'uv'}" in result.stdout
    assert runner.invoke(app, ["protect", "--venv", str(venv)]).exit_code == 0
    result = runner.invoke(app, ["protect", "--check", "--venv", str(venv)])
    assert result.exit_code == 0, result.stdout
