"""What the second attack found, each closed by a mechanism: one-line fields refuse the
characters printable() escapes; every change's text is redacted where it is made; a forged
report's secrets are redacted on this side too; lockfile values of the wrong type are one
line; a damaged dist-info is a warning, not a lost snapshot."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.render.text import printable
from envguard.snapshots import store
from envguard.snapshots.models import Source
from factories import make_dist_info, package, snapshot

runner = CliRunner()
TOKEN = "ghp_" + "A1b2C3d4E5" * 4  # a GitHub token shape
SECRET = "supersecret123"


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\x9b", "\x85", "\u061c", "\u2028"])
def test_a_name_with_bidi_or_c1_characters_is_refused(tmp_path: Path, char: str) -> None:
    data = json.loads(store.dumps(snapshot([package("ok", "1")])))
    base = _write(tmp_path / "base.json", data)
    data["name"] = f"evil{char}name"
    evil = _write(tmp_path / "evil.json", data)
    for args in (
        ["diff", str(evil), "--against", str(base)],
        ["rebuild", str(evil), "--venv", "v"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert char not in result.output and len(result.stderr.strip().splitlines()) == 1
    assert printable(char) != char


def test_lockfile_urls_never_print_their_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    commit = "a" * 40
    pkg = package(
        "rich", "13.0", source=Source(kind="vcs", url="https://github.com/x/rich", commit=commit)
    )
    _write(tmp_path / "s.json", json.loads(store.dumps(snapshot([pkg]))))
    (tmp_path / "r.txt").write_text(
        f"rich @ git+https://user:{SECRET}@github.com/x/rich@{'b' * 40}\n"
        f"other @ https://example.invalid/o.whl?token={SECRET}\n"
    )
    for fmt in ("table", "json", "markdown", "github"):
        result = runner.invoke(app, ["check", "s.json", "--lock", "r.txt", "--format", fmt])
        assert result.exit_code == 1, result.stderr
        assert SECRET not in result.output, fmt
    assert "rich" in summary.read_text() and SECRET not in summary.read_text()


def test_secret_env_values_in_a_snapshot_file_are_never_shown(tmp_path: Path) -> None:
    data = json.loads(store.dumps(snapshot([package("ok", "1")])))
    base = _write(tmp_path / "base.json", data)
    data["env"] = {"MY_CI_SECRET_TOKEN": SECRET, "NCCL_DEBUG": f"INFO {TOKEN}"}
    evil = _write(tmp_path / "evil.json", data)
    for fmt in ("table", "json", "markdown"):
        result = runner.invoke(app, ["diff", str(evil), "--against", str(base), "--format", fmt])
        assert result.exit_code == 1
        assert SECRET not in result.output and TOKEN not in result.output
    assert store.load(evil).env["MY_CI_SECRET_TOKEN"].startswith("<redacted:")


def test_a_forged_reports_secrets_are_redacted_here_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    from envguard.probe.payload import probe_payload

    report = json.loads(
        subprocess.run(
            [sys.executable, "-I", "-S", "-"],
            input=probe_payload({"default_caches": False}),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    report["env"] = {"MY_CI_SECRET_TOKEN": SECRET}
    report["host"] = f"h-{TOKEN}"
    report["warnings"] = [f"\x1b]0;pwn\x07 {TOKEN}"]
    report["packages"][0]["direct_url"] = {
        "url": f"https://user:{SECRET}@example.invalid/x.git",
        "vcs_info": {"vcs": "git", "commit_id": "c" * 40},
    }
    (tmp_path / "answer").write_text(json.dumps(report))
    fake = tmp_path / "fake-ssh"
    fake.write_text(f"#!/bin/sh\ncat > /dev/null\ncat '{tmp_path / 'answer'}'\n")
    fake.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["snapshot", "--via", f"{fake} gpu01", "--name", "f"])
    assert result.exit_code == 0, result.stderr
    written = (tmp_path / "snapshots" / "f.json").read_text()
    for text in (written, result.output):
        assert (
            SECRET not in text and TOKEN not in text and "\x1b" not in text and "\x07" not in text
        )


@pytest.mark.parametrize(
    ("a_line", "b_line"),
    [
        ("dependencies = 5", ""),
        ('dependencies = [{ name = "b", marker = 5 }]', ""),
        ('dependencies = [{ name = "b", extra = 5 }]', ""),
        ('dependencies = [{ name = "b" }]', "resolution-markers = 5"),
    ],
)
def test_uv_lock_values_of_the_wrong_type_are_one_line(
    tmp_path: Path, a_line: str, b_line: str
) -> None:
    lock = tmp_path / "uv.lock"  # no pyproject.toml beside it: envguard's own walk reads it
    lock.write_text(
        'version = 1\n\n[[package]]\nname = "a"\nversion = "1"\nsource = { editable = "." }\n'
        f'{a_line}\n\n[[package]]\nname = "b"\nversion = "1"\nsource = {{ registry = "x" }}\n'
        f"{b_line}\n"
    )
    _write(tmp_path / "s.json", json.loads(store.dumps(snapshot([package("b", "1")]))))
    result = runner.invoke(app, ["check", str(tmp_path / "s.json"), "--lock", str(lock)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1


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
