"""--via and --hosts through a fake `ssh` that maps host names to local venvs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from factories import make_git_repo

runner = CliRunner()

FAKE_SSH = """#!/usr/bin/env bash
# ssh HOST COMMAND...: like ssh, the far side's shell runs the words joined by spaces.
set -o pipefail
host="$1"; shift
case "$host" in
  gpu-down) echo "ssh: connect to host $host port 22: Connection refused" >&2; exit 255;;
  gpu-hang*) exec sleep 60;;
esac
home="$FAKE_HOSTS/$host"
[ -d "$home" ] || { echo "ssh: Could not resolve hostname $host" >&2; exit 255; }
set -a; . "$home/env"; set +a
export PATH="$home/venv/bin:$PATH"
bash -c "$*" | tee -a "$home/wire"
"""


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def fake_hosts(
    tmp_path: Path, venv_factory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> Path:
    """gpu01 and gpu02 identical; gpu03 has torch +cu130, an extra package, other NCCL env."""
    root = tmp_path / "hosts"
    stacks = {
        "gpu01": (
            ["torch==2.11.0+cu128", "transformers==4.46.0"],
            "NCCL_ALGO=Ring\nHF_TOKEN=hf_secret_gpu01\n",
        ),
        "gpu02": (
            ["torch==2.11.0+cu128", "transformers==4.46.0"],
            "NCCL_ALGO=Ring\nHF_TOKEN=hf_secret_gpu01\n",
        ),
        "gpu03": (
            ["torch==2.11.0+cu130", "transformers==4.46.0", "sglang==0.4.0"],
            "NCCL_ALGO=Tree\nHF_TOKEN=hf_secret_gpu03\n",
        ),
    }
    for host, (reqs, env) in stacks.items():
        (root / host).mkdir(parents=True)
        venv = venv_factory(f"venv-{host}", *reqs)
        (root / host / "venv").symlink_to(venv)
        (root / host / "env").write_text(env)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text(FAKE_SSH)
    (bindir / "ssh").chmod(0o755)
    monkeypatch.setenv("FAKE_HOSTS", str(root))
    monkeypatch.setenv("PATH", f"{bindir}:{__import__('os').environ['PATH']}")
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    return root


def test_via_captures_remote_env_redacted_on_the_far_side(fake_hosts: Path, in_tmp: Path) -> None:
    repo = make_git_repo(in_tmp / "remote-code")
    code, _, err = invoke(
        "snapshot",
        "--via",
        "ssh gpu03",
        "--name",
        "r",
        "--repo",
        str(repo),
        "--metric",
        "tok_s=4300",
    )
    assert code == 0, err
    text = (in_tmp / "snapshots" / "r.json").read_text()
    data = json.loads(text)
    assert data["via"] == "ssh gpu03"
    assert data["env"]["NCCL_ALGO"] == "Tree"
    assert data["env"]["HF_TOKEN"].startswith("<redacted:")
    versions = {p["name"]: p["version"] for p in data["packages"]}
    assert versions["torch"] == "2.11.0+cu130" and "sglang" in versions
    assert data["torch"]["cuda"] == "13.0"
    assert [r["path"] for r in data["repos"]] == [str(repo)]
    assert "hf_secret_gpu03" not in text
    assert "hf_secret_gpu03" not in (fake_hosts / "gpu03" / "wire").read_text()
    # diff through the same prefix: nothing changed
    code, out, err = invoke("diff", "r", "--via", "ssh gpu03", "--format", "json")
    assert code == 0, out + err
    code, _, err = invoke("diff", "r")  # a recorded prefix is never run on its own
    assert code == 2 and "pass --via yourself" in err


@pytest.mark.parametrize(
    ("via", "message"),
    [
        (
            "ssh gpu-down",
            "--via ssh gpu-down: failed (exit 255): ssh: connect to host gpu-down port 22: Connection refused",
        ),
        ("ssh nowhere", "Could not resolve hostname nowhere"),
        ("no-such-prefix-cmd x", "--via no-such-prefix-cmd x: cannot run the prefix"),
        ("ssh 'unclosed", "cannot split it"),
    ],
)
def test_failing_prefix_is_one_line_exit_2(
    fake_hosts: Path, in_tmp: Path, via: str, message: str
) -> None:
    code, _, err = invoke("snapshot", "--via", via, "--name", "x")
    assert code == 2
    assert err.startswith("error: ") and message in err.splitlines()[0]
    assert not (in_tmp / "snapshots" / "x.json").exists()


@pytest.mark.slow
def test_hosts_in_parallel_with_a_failure_and_a_hang(fake_hosts: Path, in_tmp: Path) -> None:
    start = time.monotonic()
    code, out, err = invoke(
        "snapshot",
        "--via",
        "ssh {host}",
        "--hosts",
        "gpu01,gpu02,gpu03,gpu-down,gpu-hang",
        "--name",
        "run",
        "--timeout",
        "4",
        "--jobs",
        "5",
    )
    elapsed = time.monotonic() - start
    assert code == 1
    assert elapsed < 30  # bounded by the timeout, not the hang's 60 s
    assert "wrote 3 of 5 hosts" in out
    assert "failed: gpu-down: " in err and "Connection refused" in err
    assert "failed: gpu-hang: " in err and "no answer within 4s" in err
    folder = in_tmp / "snapshots" / "run"
    assert sorted(p.name for p in folder.iterdir()) == ["gpu01.json", "gpu02.json", "gpu03.json"]
    for host in ("gpu01", "gpu03"):
        assert "hf_secret" not in (folder / f"{host}.json").read_text()
        assert "hf_secret" not in (fake_hosts / host / "wire").read_text()
    code, out, _ = invoke("fleet", str(folder), "--format", "json")
    assert code == 1
    report = json.loads(out)
    assert report["odd_hosts"] == ["gpu03"]
    assert [g["hosts"] for g in report["groups"]] == [["gpu01", "gpu02"], ["gpu03"]]
    items = {d["item"]: d["values"] for d in report["differences"]}
    assert {v["value"]: v["hosts"] for v in items["package torch"]} == {
        "2.11.0+cu128": ["gpu01", "gpu02"],
        "2.11.0+cu130": ["gpu03"],
    }
    assert "env NCCL_ALGO" in items and "package sglang" in items and "torch cuda" in items
    code, out, _ = invoke("fleet", str(folder / "gpu01.json"), str(folder / "gpu02.json"))
    assert code == 0 and "all 2 hosts agree" in out


@pytest.mark.parametrize("hosts", ["a;rm -rf ~", "-oProxyCommand=touch /tmp/pwned", "gpu01,,a b"])
def test_hostile_host_names_are_refused(fake_hosts: Path, in_tmp: Path, hosts: str) -> None:
    code, _, err = invoke("snapshot", "--via", "ssh {host}", "--hosts", hosts, "--name", "h")
    assert code == 2 and "is not a host name" in err
    assert not (in_tmp / "snapshots" / "h").exists()


def test_hostfile_and_placeholder_rules(fake_hosts: Path, in_tmp: Path) -> None:
    (in_tmp / "hosts.txt").write_text("# rack 1\ngpu01\ngpu02  # spare\n")
    code, _out, err = invoke(
        "snapshot", "--via", "ssh {host}", "--hosts", "@hosts.txt", "--name", "hf"
    )
    assert code == 0, err
    assert sorted(p.name for p in (in_tmp / "snapshots" / "hf").iterdir()) == [
        "gpu01.json",
        "gpu02.json",
    ]
    # --out with {host}, as its help says: each host's file named from it, no folder
    # literally called "{host}.json".
    code, _out, err = invoke(
        "snapshot", "--via", "ssh {host}", "--hosts", "gpu01,gpu02", "--out", "fl/{host}.json"
    )
    assert code == 0, err
    assert sorted(p.name for p in (in_tmp / "fl").iterdir()) == ["gpu01.json", "gpu02.json"]
    code, _, err = invoke("snapshot", "--via", "ssh {host}", "--name", "z")
    assert code == 2 and "pass --hosts" in err
    # From the API, a list: each name checked, each once (two captures, one file).
    from envguard import api
    from envguard.errors import UsageError

    for hosts, why in ((["gpu01", "gpu01"], "listed twice"), (["a b"], "not a host name")):
        with pytest.raises(UsageError, match=why):
            api.snapshot_hosts(hosts, via="ssh {host}", folder=in_tmp / "api")
    code, _, err = invoke("snapshot", "--via", "ssh gpu01", "--hosts", "gpu01", "--name", "z")
    assert code == 2 and "needs {host} in --via" in err


@pytest.mark.slow
def test_ctrl_c_stops_a_fleet_capture_promptly(fake_hosts: Path, in_tmp: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envguard",
            "snapshot",
            "--via",
            "ssh {host}",
            "--hosts",
            "gpu-hang,gpu-hang2,gpu-hang3",
            "--jobs",
            "2",
            "--timeout",
            "60",
            "--name",
            "c",
        ],
        env={**os.environ, "FAKE_HOSTS": str(fake_hosts)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert time.monotonic() - start < 10  # not the hosts' 60 s timeout
    assert proc.returncode != 0
    assert not list(in_tmp.glob("snapshots/c/*.json"))  # no host finished: nothing written


@pytest.mark.parametrize("host", ["[::1]", "::1", "fe80::1%eth0", "user@gpu01", "gpu-01.lab"])
def test_ipv6_and_user_hosts_are_host_names(host: str) -> None:
    from envguard.snapshots.hosts import check_host

    assert check_host(host) == host


@pytest.mark.parametrize("host", ["..", "a/b", "-x", "a b", "a\nb"])
def test_a_forged_host_in_a_snapshot_is_named_as_such(host: str) -> None:
    from envguard.errors import UsageError
    from envguard.snapshots.hosts import check_host

    with pytest.raises(UsageError) as caught:
        check_host(host, source="the snapshot's host")
    assert caught.value.message.startswith("the snapshot's host: ")
