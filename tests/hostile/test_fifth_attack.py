"""What the fifth attack found, each closed by a mechanism: git never runs a filter a repo's
config names (editable installs of a hostile venv included) nor writes its index; no
GitHub workflow command of either syntax survives wrapping; the fingerprint cache keys on
ctime and trusts only a folder and file of the user's own; the redaction pre-check folds
case as re.IGNORECASE would."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.probe.payload import probe_payload
from envguard.redact import redact_text
from envguard.render.text import printable
from envguard.snapshots import store
from factories import make_dist_info, make_venv, package, snapshot

runner = CliRunner()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


def test_an_editable_install_in_a_hostile_venv_runs_no_git_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "pwned"
    venv = tmp_path / "venv"
    make_venv(venv)
    site = next((venv / "lib").glob("python*/site-packages"))
    repo = tmp_path / "bar"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("hi\n")
    (repo / ".gitattributes").write_text("* filter=x\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "i")
    _git(repo, "config", "filter.x.clean", f'sh -c "touch {marker}; cat"')
    _git(repo, "config", "filter.x.process", f'sh -c "touch {marker}"')
    os.utime(repo / "a.py", (1_000_000_000, 1_000_000_000))  # stat-dirty: git would filter
    index = (repo / ".git" / "index").stat().st_ino
    make_dist_info(
        site,
        "bar",
        "1.0",
        direct_url=json.dumps({"url": repo.as_uri(), "dir_info": {"editable": True}}),
    )
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["snapshot", "--python", str(venv), "--name", "s"])
    assert result.exit_code == 0, result.stderr
    assert not marker.exists(), "git ran a filter the repo's config names"
    assert (repo / ".git" / "index").stat().st_ino == index, "reading a repo wrote its index"
    recorded = json.loads((tmp_path / "snapshots" / "s.json").read_text())["repos"]
    assert [r["path"] for r in recorded] == [str(repo)]


@pytest.mark.parametrize("text", ["::add-mask::x", "a ##[error]b", "x" * 71 + " ::error::fake"])
def test_no_workflow_command_survives_wrapping(text: str) -> None:
    shown = printable(text)
    assert "::" not in shown and "##[" not in shown


def test_show_wraps_nothing_into_a_workflow_command(in_tmp: Path) -> None:
    data = json.loads(store.dumps(snapshot([package("ok", "1")], name="w")))
    data["warnings"] = ["x" * 71 + " ::add-mask::supersecret ::error::fake"]
    data["note"] = "y" * 60 + " ##[error]legacy"
    (in_tmp / "w.json").write_text(json.dumps(data))
    out = runner.invoke(app, ["show", "w.json"], env={"COLUMNS": "80"}).stdout
    assert all(not line.strip().startswith("::") for line in out.splitlines())
    assert "##[" not in out


def test_the_fingerprint_cache_sees_an_in_place_rewrite(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    make_venv(venv)
    site = next((venv / "lib").glob("python*/site-packages"))
    info = make_dist_info(site, "foo", "1.0", record="foo/__init__.py,sha256=AAAA,1\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}

    def fingerprint() -> str:
        out = subprocess.run(
            [str(venv / "bin" / "python"), "-I", "-S", "-"],
            input=probe_payload({"default_caches": False}),
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
        return next(p["fingerprint"] for p in json.loads(out)["packages"] if p["name"] == "foo")

    before = fingerprint()
    record = info / "RECORD"
    stat = record.stat()
    with open(record, "r+") as fh:  # same size, in place, the mtime put back
        fh.write("foo/__init__.py,sha256=ZZZZ,1\n")
    os.utime(record, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert fingerprint() != before


def test_a_cache_someone_else_could_write_is_not_trusted(tmp_path: Path) -> None:
    from factories import load_target

    target = load_target()
    folder = tmp_path / "xdg" / "envguard"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    sites = ["/venv/lib/python3.11/site-packages"]
    assert target.DistCache(str(folder / "dists-v3"), sites).path is None
    link = tmp_path / "xdg2"
    link.mkdir()
    (link / "envguard").symlink_to(tmp_path)
    assert target.DistCache(str(link / "envguard" / "dists-v3"), sites).path is None


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: To\u212aen supersecret123",
        "---password supersecret123",
        "-_password supersecret123",
    ],
)
def test_the_redaction_precheck_folds_case_and_dashes(text: str) -> None:
    assert "supersecret123" not in redact_text(text)
