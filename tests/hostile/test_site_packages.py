"""A damaged or hostile venv's site-packages: a .dist-info that cannot be read as one line
costs only itself (a warning, or that one requirement), and no .pth file of the target runs
while it is probed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.snapshots import store
from factories import make_dist_info, make_venv
from hostile.helpers import envguard

runner = CliRunner()


def test_a_dist_info_with_a_control_character_in_its_version_is_a_warning(
    tmp_path: Path, good_venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = next((good_venv / "lib").glob("python*/site-packages"))
    make_dist_info(
        site,
        "damaged",
        "1.0",
        metadata="Metadata-Version: 2.1\nName: damaged\nVersion: 1.0\x1b[31m\n",
    )
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["snapshot", "--python", str(good_venv), "--name", "d"])
    assert result.exit_code == 0, result.stderr
    snap = store.load(tmp_path / "snapshots" / "d.json")
    assert "damaged" not in snap.package_map()
    assert any("damaged" in w and "not one line" in w for w in snap.warnings)
    assert "\x1b" not in result.output


def test_no_pth_file_of_the_target_runs(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    make_venv(venv)
    (site,) = venv.glob("lib/python*/site-packages")
    ran = tmp_path / "ran"
    (site / "zz_evil.pth").write_text(f"import os; open({str(ran)!r}, 'w').write('x')\n")
    subprocess.run([str(venv / "bin" / "python"), "-c", "pass"], check=True)
    assert ran.exists()  # the control: a normal start runs it
    ran.unlink()
    result = envguard("snapshot", "--python", str(venv), "--out", "-", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not ran.exists(), "a .pth file of the target ran during the probe"


def test_a_stray_carriage_return_in_one_requirement_costs_only_that_line(
    tmp_path: Path,
) -> None:
    """A Requires-Dist with a lone \\r once failed the whole probe report (exit 2 for every
    snapshot, diff and check of that venv): that requirement is left out, nothing else."""
    from factories import load_target

    target = load_target()
    meta = tmp_path / "METADATA"
    meta.write_bytes(
        b"Metadata-Version: 2.1\nName: odd\nVersion: 1.0\n"
        b"Requires-Dist: foo\rbar\nRequires-Dist: six\n\nbody\n"
    )
    requires: list[str] = []
    assert target.metadata_headers(str(meta), requires) == {"Name": "odd", "Version": "1.0"}
    assert requires == ["six"]
