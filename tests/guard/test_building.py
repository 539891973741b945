"""No build code before the decision: a local project whose in-tree build backend writes a
.pth into the venv as soon as it is imported. Previewing its install would run it; the guard
refuses without --allow-build, and the venv is as it was."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.guard import journal
from factories import UV, make_venv

runner = CliRunner()

BACKEND = """import os
open(os.path.join({site!r}, "planted.pth"), "w").write("")

def get_requires_for_build_wheel(config_settings=None):
    return []

def prepare_metadata_for_build_wheel(directory, config_settings=None):
    info = os.path.join(directory, "proj-1.0.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\\nName: proj\\nVersion: 1.0\\n")
    return "proj-1.0.dist-info"

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise SystemExit("not built here")
"""


def _site(venv: Path) -> Path:
    return Path(glob.glob(str(venv / "lib" / "python3*" / "site-packages"))[0])


def _project(where: Path, venv: Path) -> Path:
    """A project whose build backend (in-tree, its dependencies dynamic: uv cannot read
    them statically) writes a .pth into ``venv`` when it runs."""
    where.mkdir()
    (where / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "evil"\nbackend-path = ["."]\n'
        '[project]\nname = "proj"\nversion = "1.0"\ndynamic = ["dependencies"]\n'
    )
    (where / "evil.py").write_text(BACKEND.format(site=str(_site(venv))))
    return where


def _listing(venv: Path) -> list[str]:
    return sorted(p.name for p in _site(venv).iterdir())


def test_a_uv_preview_that_would_run_a_build_backend_is_refused_and_the_venv_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = tmp_path / ".venv"
    make_venv(venv)
    monkeypatch.chdir(tmp_path)
    _project(tmp_path / "proj", venv)
    before = _listing(venv)
    result = runner.invoke(
        app, ["guard", "--venv", str(venv), "--", UV, "pip", "install", "./proj"]
    )
    assert result.exit_code == 2, result.stderr
    assert "./proj: previewing this install would run its build backend" in result.stderr
    assert "--allow-build lets the preview run its build backend" in result.stderr
    assert _listing(venv) == before
    assert journal.records(venv) == []
    # The backend is real: allowed, the preview runs it, and it writes into the venv.
    preview = ["guard", "--venv", str(venv), "--preview", "--allow-build"]
    allowed = runner.invoke(app, [*preview, "--", UV, "pip", "install", "./proj"])
    assert "planted.pth" in _listing(venv), allowed.stderr


def test_a_pip_preview_of_a_local_project_is_refused_before_pip_runs(
    pip_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip builds a local folder even when held to wheels: the command and its
    requirements files are read first."""
    venv = pip_venv / "guarded"
    monkeypatch.chdir(tmp_path)
    _project(tmp_path / "proj", venv)
    Path("reqs.txt").write_text("six\n-e ./proj\n")
    before = _listing(venv)
    python = str(venv / "bin" / "python")
    for args in (
        ["./proj"],
        ["-e", "./proj"],
        ["-r", "reqs.txt"],
        [f"proj @ file://{tmp_path}/proj"],
    ):
        result = runner.invoke(
            app, ["guard", "--venv", str(venv), "--", python, "-m", "pip", "install", *args]
        )
        assert result.exit_code == 2, result.stderr
        assert "previewing this install would run its build backend" in result.stderr
        assert "--allow-build" in result.stderr
        assert _listing(venv) == before


def test_uv_add_of_a_project_to_build_is_refused_and_the_project_left_as_it_was(
    project: tuple[Path, Path],
) -> None:
    """`uv add` resolves before it syncs: held to --no-build, nothing of the backend runs."""
    venv, _ = project
    _project(Path("proj").absolute(), venv)
    files = {name: Path(name).read_bytes() for name in ("pyproject.toml", "uv.lock")}
    before = _listing(venv)
    result = runner.invoke(app, ["guard", "--", UV, "add", "./proj"])
    assert result.exit_code == 2, result.stderr
    assert "--allow-build" in result.stderr
    assert _listing(venv) == before
    assert {name: Path(name).read_bytes() for name in files} == files


def test_a_project_whose_metadata_its_backend_must_say_is_refused_before_uv_runs(
    project: tuple[Path, Path],
) -> None:
    """uv builds the project itself (a workspace member) even under --no-build: a project
    with a build backend and dynamic metadata is refused before uv starts."""
    venv, _ = project
    Path("evil.py").write_text(BACKEND.format(site=str(_site(venv))))
    text = Path("pyproject.toml").read_text()
    Path("pyproject.toml").write_text(
        text.replace(
            'version = "0.1.0"\n', 'version = "0.1.0"\ndynamic = ["optional-dependencies"]\n'
        )
        + '[build-system]\nrequires = []\nbuild-backend = "evil"\nbackend-path = ["."]\n'
    )
    before = _listing(venv)
    for argv in (["add", "six"], ["sync"]):
        result = runner.invoke(app, ["guard", "--", UV, *argv])
        assert result.exit_code == 2, result.stderr
        assert f"the project at {Path.cwd()}: previewing this install would run" in result.stderr
        assert _listing(venv) == before
    # The backend is real: allowed, uv's preview runs it, and it writes into the venv.
    runner.invoke(app, ["guard", "--preview", "--allow-build", "--", UV, "add", "six"])
    assert "planted.pth" in _listing(venv)


def test_an_sdist_on_the_index_is_neither_built_by_the_preview_nor_by_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newest release is an sdist (its backend would run): the dry run, held to wheels,
    resolves the wheel before it, and the install, held the same way, installs what the
    preview showed instead of building the sdist."""
    import io
    import tarfile

    from envguard.testing import make_wheel
    from factories import run

    wh = tmp_path / "wh"
    make_wheel(wh, "fresh", "0.9")
    with tarfile.open(wh / "fresh-1.0.tar.gz", "w:gz") as sdist:
        for name, text in (
            ("PKG-INFO", "Metadata-Version: 2.1\nName: fresh\nVersion: 1.0\n"),
            ("pyproject.toml", '[build-system]\nrequires = []\nbuild-backend = "gone"\n'),
        ):
            data = text.encode()
            info = tarfile.TarInfo(f"fresh-1.0/{name}")
            info.size = len(data)
            sdist.addfile(info, io.BytesIO(data))
    venv = tmp_path / ".venv"
    make_venv(venv)
    monkeypatch.chdir(tmp_path)
    install = [UV, "pip", "install", "--no-index", "--find-links", str(wh), "fresh"]
    result = runner.invoke(app, ["guard", "--venv", str(venv), "--", *install])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("this install would add 1 package")
    assert "fresh==0.9" in run([UV, "pip", "freeze", "--python", str(venv)]).stdout
