"""`envguard check --lock`: uv.lock, pylock.toml and requirements.txt against a snapshot."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.compare.lockfiles import lock_drift, read_lock
from envguard.compare.policy import Policy
from envguard.errors import UsageError
from envguard.snapshots import store
from envguard.snapshots.models import Source
from factories import UV, make_torch_wheel, make_wheel, package, run, snapshot

runner = CliRunner()

PYPROJECT = """\
[project]
name = "train"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["torch==2.11.0+cu128", "transformers", "sglang; sys_platform == 'darwin'"]

[dependency-groups]
dev = ["pytest"]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project locked by uv itself, offline, with a darwin-only dependency."""
    wh = tmp_path / "wh"
    make_torch_wheel(wh, "2.11.0+cu128", "12.8")
    for name, version in [("transformers", "4.46.0"), ("sglang", "0.4.0"), ("pytest", "8.0.0")]:
        make_wheel(wh, name, version)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(PYPROJECT)
    index = ["--offline", "--no-index", "--find-links", str(wh)]
    run([UV, "lock", "--quiet", *index], cwd=proj)
    out = run([UV, "export", "--quiet", "--format", "pylock.toml", *index], cwd=proj).stdout
    (proj / "pylock.toml").write_text(out)
    return proj


def linux_snapshot(*pkgs: tuple[str, str]) -> object:
    return snapshot([package(n, v) for n, v in pkgs])


GOOD = (("torch", "2.11.0+cu128"), ("transformers", "4.46.0"), ("pytest", "8.0.0"))


@pytest.mark.parametrize("lockname", ["uv.lock", "pylock.toml"])
def test_real_locks_match_and_ignore_other_platforms(project: Path, lockname: str) -> None:
    snap = linux_snapshot(*GOOD)
    pins = read_lock(project / lockname, snap).pins  # type: ignore[arg-type]
    assert "sglang" not in pins  # darwin-only: no false drift on linux
    drift = lock_drift(snap, pins, policy=Policy(), lock=lockname)  # type: ignore[arg-type]
    assert drift.changes == ()


@pytest.mark.parametrize("lockname", ["uv.lock", "pylock.toml"])
def test_real_locks_report_each_difference(project: Path, lockname: str) -> None:
    snap = linux_snapshot(
        ("torch", "2.11.0+cu130"), ("transformers", "4.46.0"), ("flashinfer-python", "0.2.0")
    )
    drift = lock_drift(
        snap,
        read_lock(project / lockname, snap).pins,  # type: ignore[arg-type]
        policy=Policy(),  # type: ignore[arg-type]
        lock=lockname,
    )
    found = {(c.kind, c.name): c.severity.value for c in drift.changes}
    assert found == {
        ("pin_differs", "torch"): "critical",
        ("not_in_lock", "flashinfer-python"): "critical",
        ("not_installed", "pytest"): "warning",
    }


def test_requirements_txt_pins_urls_editables_and_markers(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "pyproject.toml").write_text('[project]\nname = "My_Lib"\nversion = "0"\n')
    (tmp_path / "base.txt").write_text("transformers==4.46.0\n")
    req = tmp_path / "requirements.txt"
    req.write_text(
        "# pinned\n--extra-index-url https://download.pytorch.org/whl/cu128\n"
        "-r base.txt\n"
        "torch==2.11.0+cu128 \\\n    --hash=sha256:abc\n"
        "sglang==0.4.0 ; sys_platform == 'darwin'\n"
        "vcs-dep @ git+https://github.com/o/r@0123456789abcdef\n"
        "-e ./lib\n"
    )
    snap = snapshot(
        [
            package("torch", "2.11.0+cu128"),
            package("transformers", "4.46.0"),
            package(
                "my-lib",
                "0",
                source=Source(
                    kind="editable", path=str(tmp_path / "lib"), url=f"file://{tmp_path / 'lib'}"
                ),
            ),
            package(
                "vcs-dep",
                "1.0",
                source=Source(
                    kind="vcs", url="https://github.com/o/r", vcs="git", commit="0123456789abcdef"
                ),
            ),
        ]
    )
    pins = read_lock(req, snap).pins
    assert set(pins) == {"torch", "transformers", "vcs-dep", "my-lib"}
    assert lock_drift(snap, pins, policy=Policy(), lock="r").changes == ()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("requirements.txt", "torch===\n", "requirements.txt:1: not a valid requirement"),
        ("requirements.txt", "ok==1\nfoo ; python_version >>> '3'\n", "requirements.txt:2"),
        ("uv.lock", "[[package]\nname=", "not valid TOML"),
        ("uv.lock", "version = 1\n", "no [[package]] entries"),
        (
            "pylock.toml",
            "packages = []\n",
            "not a valid PEP 751 lock (Missing required value in 'lock-version')",
        ),
    ],
)
def test_unparsable_lock_is_exit_2(
    tmp_path: Path, name: str, content: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(content)
    (tmp_path / "s.json").write_text(store.dumps(snapshot([package("ok", "1")])))
    with pytest.raises(UsageError, match=re.escape(message)):
        read_lock(tmp_path / name, store.load("s.json"))
    result = runner.invoke(app, ["check", "s.json", "--lock", name])
    assert result.exit_code == 2 and message in result.stderr
    assert "Traceback" not in result.stderr


def test_check_lock_cli_exit_codes(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    Path("good.json").write_text(store.dumps(linux_snapshot(*GOOD)))  # type: ignore[arg-type]
    result = runner.invoke(app, ["check", "good.json", "--lock", "uv.lock", "--format", "json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["drift"] is False
    Path("bad.json").write_text(store.dumps(linux_snapshot(("torch", "2.11.0+cu130"))))  # type: ignore[arg-type]
    result = runner.invoke(app, ["check", "bad.json", "--lock", "pylock.toml"])
    assert result.exit_code == 1 and "pins 2.11.0+cu128" in result.stdout


def test_unlabelled_pin_admits_a_variant_as_info(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("torch==2.11.0\n")
    snap = snapshot([package("torch", "2.11.0+cu128")])
    (change,) = lock_drift(snap, read_lock(req, snap).pins, policy=Policy(), lock="r").changes
    assert (change.kind, change.severity.value) == ("variant_unpinned", "info")
