"""The gate is as strict as uv: on a real uv project (offline, tiny wheels, an editable
path dependency), each state is checked by `envguard check --lock uv.lock --python .venv`
and by uv itself (`uv lock --check`, `uv sync --check`) in the same test, and the two
agree on pass or fail. docs/lock-gate.md tabulates these states."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.testing import make_simple_index
from factories import UV, make_project, make_wheel, run

runner = CliRunner()

PYPROJECT = """\
[project]
name = "app"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["six", "lib"]

[tool.uv]
package = false

[tool.uv.sources]
lib = { path = "lib", editable = true }
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project locked by `uv lock` offline: six from a local index, lib editable."""
    root = tmp_path_factory.mktemp("gate")
    wheels = [make_wheel(root / "wh", n, v) for n, v in (("six", "1.16.0"), ("numpy", "2.1.0"))]
    wheels.append(make_wheel(root / "wh", "pip", "24.0"))
    base = make_simple_index(root / "idx", {"pypi": wheels})
    proj = root / "proj"
    make_project(proj / "lib", "lib", "0.1.0")
    (proj / "pyproject.toml").write_text(PYPROJECT)
    run([UV, "lock", "--quiet", "--offline", "--default-index", f"{base}/pypi"], cwd=proj)
    return proj


@pytest.fixture
def project(template: Path, tmp_path: Path) -> Path:
    """A copy of the template, synced by `uv sync` into its own .venv."""
    proj = tmp_path / "proj"
    shutil.copytree(template, proj)
    run([UV, "sync", "--quiet", "--offline", "--python", sys.executable], cwd=proj)
    return proj


def uv_fails(proj: Path, *args: str) -> bool:
    """uv's verdict: does `uv ARGS` (a --check) fail on this project?"""
    proc = subprocess.run(
        [UV, *args], cwd=proj, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode in (0, 1, 2), proc.stderr
    return proc.returncode != 0


def gate(proj: Path, *flags: str) -> tuple[int, list[dict[str, str]]]:
    """envguard's verdict: exit code and changes of the gate on the project's venv."""
    result = runner.invoke(
        app,
        ["check", "--lock", str(proj / "uv.lock"), "--python", str(proj / ".venv"),
         "--format", "json", *flags],
    )  # fmt: skip
    assert result.exit_code in (0, 1), result.stderr
    return result.exit_code, json.loads(result.stdout)["changes"]


def failing(changes: list[dict[str, str]]) -> set[tuple[str, str]]:
    return {(c["kind"], c["name"]) for c in changes if c["severity"] != "info"}


@pytest.fixture
def wheelhouse(template: Path) -> Path:
    return template.parent / "wh"


def test_a_synced_venv_passes_both(project: Path) -> None:
    assert not uv_fails(project, "sync", "--check")
    assert not uv_fails(project, "lock", "--check")
    assert gate(project) == (0, [])


def test_a_stale_lock_fails_both(project: Path) -> None:
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"lib"]', '"lib", "numpy"]'))
    assert uv_fails(project, "lock", "--check")
    assert uv_fails(project, "sync", "--locked", "--check")
    code, changes = gate(project)
    assert code == 1
    assert failing(changes) == {("lock_stale", str(project / "uv.lock"))}
    stale = changes[0]
    assert stale["severity"] == "critical"
    assert stale["message"] == (
        f"{project / 'uv.lock'} is out of date with {project / 'pyproject.toml'}: run `uv lock`"
    )


def test_an_editable_reinstalled_as_a_wheel_fails_both(project: Path) -> None:
    lib = make_wheel(project.parent / "built", "lib", "0.1.0")
    run([UV, "pip", "install", "--quiet", "--offline", "--no-index", "--reinstall",
         "--python", str(project / ".venv"), str(lib)])  # fmt: skip
    assert uv_fails(project, "sync", "--check")
    code, changes = gate(project)
    assert (code, failing(changes)) == (1, {("source_differs", "lib")})
    assert "not editable" in changes[0]["message"]


def test_an_editable_from_another_checkout_fails_both(project: Path) -> None:
    other = make_project(project.parent / "other" / "lib", "lib", "0.1.0")
    run([UV, "pip", "install", "--quiet", "--offline", "--no-index", "--reinstall",
         "--python", str(project / ".venv"), "-e", str(other)])  # fmt: skip
    assert uv_fails(project, "sync", "--check")
    code, changes = gate(project)
    assert (code, failing(changes)) == (1, {("source_differs", "lib")})
    assert str(other) in changes[0]["message"]


@pytest.mark.slow
def test_an_extraneous_package_fails_both_unless_inexact(
    project: Path, wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run([UV, "pip", "install", "--quiet", "--offline", "--no-index", "--find-links",
         str(wheelhouse), "--python", str(project / ".venv"), "pip"])  # fmt: skip
    assert uv_fails(project, "sync", "--check")
    code, changes = gate(project)
    assert (code, failing(changes)) == (1, {("not_in_lock", "pip")})
    assert not uv_fails(project, "sync", "--check", "--inexact")
    code, changes = gate(project, "--inexact")
    assert code == 0 and [c["severity"] for c in changes] == ["info"]
    # The same through [tool.envguard] inexact = true, from the working directory's project.
    (tmp_path / "pyproject.toml").write_text("[tool.envguard]\ninexact = true\n")
    monkeypatch.chdir(tmp_path)
    assert gate(project)[0] == 0


def test_a_build_uv_cannot_do_offline_is_a_note_not_a_stale_lock(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path package whose metadata needs a build backend not in the cache: uv's offline
    check fails without a verdict, so the gate says it did not check, and does not fail."""
    fake = tmp_path / "uv"
    fake.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = "--check" ] && {\n'
        "  echo 'error: Failed to build `lib @ file:///x`' >&2\n"
        "  echo '  hint: Packages were unavailable because the network was disabled.' >&2\n"
        "  exit 1; }; done\n"
        f'exec {UV} "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("ENVGUARD_UV", str(fake))
    result = runner.invoke(
        app, ["check", "--lock", str(project / "uv.lock"), "--python", str(project / ".venv")]
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "was not checked" in result.stdout + result.stderr


def test_the_verdict_opens_with_the_stale_lock_in_its_own_words() -> None:
    from envguard.compare.models import Change
    from envguard.compare.policy import Policy
    from envguard.compare.severity import Severity
    from envguard.compare.verdict import lock_verdict

    stale = Change(
        section="packages",
        kind="lock_stale",
        name="uv.lock",
        severity=Severity.critical,
        message="uv.lock is out of date with pyproject.toml: run `uv lock`",
    )
    moved = Change(
        section="packages",
        kind="source_differs",
        name="lib",
        expected="editable ./lib",
        actual="lib 1.0 from an index",
        severity=Severity.warning,
        message="lib: installed from an index, the lock says editable ./lib",
    )
    lines = lock_verdict((stale, moved), Policy())
    assert lines[0] == stale.message
    assert lines[1].startswith("installed from another source: lib")
