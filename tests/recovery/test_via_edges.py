"""The edges of --via (issue 25): large kept files, their modes, prefixes that pass no stdin,
timeouts that let the prefix clean up, and the engine's own words in the error."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envguard.errors import ActionError
from envguard.probe.channel import RemoteTarget
from envguard.snapshots import keep
from envguard.snapshots.blobs import Blobs, store_for
from factories import engine_answers, envguard_cli, slurm_job, snapshot

ENVGUARD = [sys.executable, "-m", "envguard"]
envguard = envguard_cli


def _prefix(tmp_path: Path, body: str, name: str = "fake-prefix") -> Path:
    prefix = tmp_path / name
    prefix.write_text(f"#!/bin/sh\n{body}\n")
    prefix.chmod(0o755)
    return prefix


def test_keep_files_through_a_prefix_streams_a_large_file_and_keeps_its_mode(
    tmp_path: Path,
) -> None:
    """A 3 MiB script (past the 1 MiB that one answer holds) is kept whole through --via,
    and a restore through --via brings back its content and its x bit."""
    box = tmp_path / "box"
    box.mkdir()
    script = box / "train.sh"
    script.write_bytes(b"#!/bin/sh\n" + os.urandom(3 << 20))
    script.chmod(0o755)
    prefix = _prefix(tmp_path, f'cd {box} && exec "$@"')
    via = ["--via", str(prefix), "--python", sys.executable]
    done = envguard(
        "snapshot", *via, "--name", "good", "--file", str(script), "--keep-files",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    sha = hashlib.sha256(script.read_bytes()).hexdigest()
    assert Blobs(store_for(tmp_path / "snapshots" / "good.json")).has(sha)
    script.write_text("hacked\n")
    script.chmod(0o644)
    out = envguard(
        "restore", "good", *via, "--venv", sys.prefix, "--execute", "--format", "json",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert hashlib.sha256(script.read_bytes()).hexdigest() == sha
    assert script.stat().st_mode & 0o777 == 0o755


def test_a_file_past_the_per_file_cap_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "weights.bin"
    big.write_bytes(os.urandom(5000))
    monkeypatch.setattr(keep, "REMOTE_FILE_CAP", 4096)
    target = RemoteTarget([str(_prefix(tmp_path, 'exec "$@"'))], sys.executable, timeout=60)
    snap = snapshot([]).model_copy(update={"files": ()})
    from envguard.snapshots.models import FileDigest

    digest = FileDigest.model_construct(
        path=str(big), sha256=hashlib.sha256(big.read_bytes()).hexdigest()
    )
    snap = snap.model_copy(update={"files": (digest,)})
    with pytest.raises(ActionError) as caught:
        keep.keep_files(snap, Blobs(tmp_path / "blobs"), target)
    assert str(big) in caught.value.message and "4.0 KiB" in caught.value.message


def test_a_prefix_that_passes_no_stdin_is_explained(tmp_path: Path) -> None:
    """`docker exec c` without -i: the far python reads an empty program and exits 0."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _prefix(bin_dir, 'shift 2; exec "$@" < /dev/null', name="docker")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [*ENVGUARD, "snapshot", "--via", "docker exec c", "--out", "-"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        "error: --via docker exec c: no answer and no error: the prefix passed no stdin:"
        " docker exec needs -i"
    )


def test_pdsh_is_refused_at_once() -> None:
    """pdsh passes no stdin: the probe would wait for its program until the timeout."""
    started = time.monotonic()
    proc = subprocess.run(
        [*ENVGUARD, "snapshot", "--via", "pdsh -w gpu01", "--out", "-"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "pdsh passes no stdin" in proc.stderr
    assert time.monotonic() - started < 10


def test_a_timeout_lets_the_prefix_clean_up_first(tmp_path: Path) -> None:
    """On a timeout the prefix gets SIGTERM (srun cancels its job step then), and SIGKILL
    only if it is still there after the grace period."""
    said = tmp_path / "said"
    slow = _prefix(tmp_path, "exec sleep 60", name="slowpy")
    prefix = _prefix(
        tmp_path,
        f"trap 'echo TERM > {said}; exit 143' TERM\necho 'waiting for the node' >&2\n"
        '"$@" &\nwait $!',
    )
    proc = envguard(
        "snapshot", "--via", prefix, "--python", slow, "--timeout", "1", "--out", "-",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no answer within 1s; it said: waiting for the node" in proc.stderr
    assert said.read_text() == "TERM\n"


def test_the_engines_own_error_is_kept_redacted(tmp_path: Path) -> None:
    """What the prefix says when it fails (Docker's daemon error) is in the message, its
    secrets redacted."""
    prefix = _prefix(
        tmp_path,
        "echo 'Error response from daemon: No such container: c"
        " (auth token=ghp_abcdefghijklmnopqrstuvwxyz0123456789)' >&2; exit 1",
    )
    proc = envguard("snapshot", "--via", prefix, "--out", "-", cwd=tmp_path)
    assert proc.returncode == 2
    assert "Error response from daemon: No such container: c" in proc.stderr
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not engine_answers("sinfo", "-h"), reason="no Slurm running here")
def test_a_timeout_through_srun_leaves_no_job_step(tmp_path: Path) -> None:
    """Against a real Slurm: srun gets SIGTERM and cancels its step; SIGKILL left the step
    running on the node until it ended by itself."""
    slow = _prefix(tmp_path, "exec sleep 60", name="slowpy")
    with slurm_job() as job:
        via = f"srun --jobid={job} --overlap -N1 -n1"
        proc = envguard(
            "snapshot", "--via", via, "--python", slow, "--timeout", "3", "--out", "-",
            cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 2 and "no answer within 3s" in proc.stderr
        time.sleep(2)
        steps = subprocess.run(
            ["squeue", "-s", "-h", "-j", job], capture_output=True, text=True, check=False
        )
        assert steps.stdout.strip() == ""
