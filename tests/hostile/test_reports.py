"""Forged probe reports: what the far side of --via answers, checked on the write path that
skips pydantic (snapshots.document), and the probe's own fingerprint cache, which must see a
rewrite in place and trust only a folder and file of the user's own. Each is one `error:` line
and exit 2, or a clean snapshot; never a traceback, never a file that envguard itself then
refuses to read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envguard.probe.payload import probe_payload
from factories import make_dist_info, make_venv, real_report


def _host(tmp_path: Path, report: dict[str, Any], *, after: str = "") -> str:
    """A --via prefix whose far side prints ``report`` (JSON escapes kept: "\\ud800")."""
    (tmp_path / "answer.json").write_text(json.dumps(report))
    fake = tmp_path / "fake-ssh"
    fake.write_text(
        f"#!/bin/sh\ncat > /dev/null\ncat '{tmp_path / 'answer.json'}'\n{after}\nexit 0\n"
    )
    fake.chmod(0o755)
    return f"{fake} gpu01"


def envguard(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envguard", *args],
        capture_output=True, text=True, cwd=cwd, timeout=120, check=False,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


def _set(report: dict[str, Any], where: str, value: Any) -> dict[str, Any]:
    target: Any = report
    keys = where.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[keys[-1]] = value
    return report


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
    assert target.DistCache(str(folder / "dists-v4"), sites).path is None
    link = tmp_path / "xdg2"
    link.mkdir()
    (link / "envguard").symlink_to(tmp_path)
    assert target.DistCache(str(link / "envguard" / "dists-v4"), sites).path is None


@pytest.mark.parametrize(
    "where",
    ["user", "packages.0.version", "packages.0.requires", "torch"],
)
def test_a_lone_surrogate_where_the_model_constrains_text_is_refused(
    tmp_path: Path, where: str
) -> None:
    report = real_report()
    value: Any = "2.1\ud800"
    if where == "packages.0.requires":
        value = ["numpy\ud800>=1"]
    elif where == "torch":
        value = {"version": "2.1\ud800", "cuda": None, "git_version": None, "hip": None, "debug": None}  # fmt: skip
    via = _host(tmp_path, _set(report, where, value))
    out = tmp_path / "s.json"
    result = envguard("snapshot", "--via", via, "--out", str(out), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "does not fit a snapshot" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()  # nothing written that envguard would then refuse to read


def test_a_lone_surrogate_in_a_secret_is_kept_as_its_digest(tmp_path: Path) -> None:
    report = _set(real_report(), "env", {"HF_TOKEN": "x\ud800", "PATH": "/bin\ud800"})
    out = tmp_path / "s.json"
    result = envguard("snapshot", "--via", _host(tmp_path, report), "--out", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    env = json.loads(out.read_text())["env"]
    assert env["HF_TOKEN"].startswith("<redacted:") and "x" not in env["HF_TOKEN"]
    shown = envguard("show", str(out), cwd=tmp_path)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr


def test_a_lone_surrogate_the_model_takes_is_shown_escaped(tmp_path: Path) -> None:
    report = _set(real_report(), "interpreter.version", "3.11\ud800")
    out = tmp_path / "s.json"
    result = envguard("snapshot", "--via", _host(tmp_path, report), "--out", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Python 3.11\\ud800" in result.stdout  # the summary line, escaped, not a traceback
    shown = envguard("show", str(out), cwd=tmp_path)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr


def test_a_direct_url_that_does_not_parse_is_no_traceback(tmp_path: Path) -> None:
    report = real_report()
    report["packages"][0]["direct_url"] = {"url": "file://[x/y", "dir_info": {}}
    name = report["packages"][0]["name"]  # the report lists site-packages' order, unsorted
    result = envguard("snapshot", "--via", _host(tmp_path, report), "--out", "-", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    packages = json.loads(result.stdout)["packages"]
    source = next(p["source"] for p in packages if p["name"] == name)
    assert source["kind"] == "dir" and source["path"] is None


@pytest.mark.slow
def test_a_daemon_holding_the_pipe_open_does_not_hold_the_capture(tmp_path: Path) -> None:
    """The far side answers, then leaves a process in a session of its own that keeps the
    answer's pipe open: the capture ends within seconds, and that process is stopped."""
    marker = tmp_path / "still-running"
    after = f"setsid sh -c 'sleep 30; touch {marker}' &"
    start = time.monotonic()
    result = envguard(
        "snapshot", "--via", _host(tmp_path, real_report(), after=after), "--timeout", "20",
        "--out", "-", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - start < 15
    assert json.loads(result.stdout)["packages"]
