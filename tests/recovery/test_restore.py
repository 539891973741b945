"""envguard restore: files, caches, variables and repos put back, each verified; every bad
input (a damaged store, a hostile archive, a snapshot naming paths outside) refused."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shlex
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from envguard.probe.payload import local_package
from envguard.recovery.restore import env_file_text, run_env
from envguard.snapshots.store import loads
from factories import snapshot as made_snapshot

apply = local_package().apply
ENVGUARD = [sys.executable, "-m", "envguard"]


def envguard(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [*ENVGUARD, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})},
    )


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@e", *args],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A work tree with a committed model script, snapshotted with its content kept."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "model.py").write_text("good = 1\n")
    _git(code, "init", "-q")
    _git(code, "add", "-A")
    _git(code, "commit", "-qm", "good")
    snapshot = ["snapshot", "--python", sys.executable, "--name", "good"]
    keep = ["--file", "code/model.py", "--repo", "code", "--keep-files"]
    done = envguard(*snapshot, *keep, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # Only the work tree made here: the test venv's editable installs (envguard's own
    # checkout) are recorded too, and --repos would check them out.
    path = tmp_path / "snapshots" / "good.json"
    data = json.loads(path.read_text())
    data["repos"] = [r for r in data["repos"] if r["path"] == str(code)]
    assert len(data["repos"]) == 1
    path.write_text(json.dumps(data))
    return tmp_path


def restore(project: Path, *args: str) -> Any:
    return envguard("restore", "good", "--venv", sys.prefix, *args, cwd=project)


def test_a_hacked_script_is_restored_from_the_store_hashed_and_the_hack_kept(
    project: Path,
) -> None:
    script = project / "code" / "model.py"
    script.write_text("good = 1\nimport builtins; builtins.DEBUG = True\n")
    planned = restore(project)
    assert planned.returncode == 0 and "planned" in planned.stdout
    assert "DEBUG" in script.read_text()  # a plan changes nothing
    done = restore(project, "--execute", "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    (item,) = [i for i in report["items"] if i["kind"] == "file"]
    assert item["status"] == "restored"
    assert script.read_text() == "good = 1\n"
    sha = hashlib.sha256(b"good = 1\n").hexdigest()
    md5 = hashlib.md5(b"good = 1\n").hexdigest()
    assert (item["sha256"], item["md5"]) == (sha, md5)
    assert "DEBUG" in Path(item["kept"]).read_text()  # nothing the user wrote is lost
    again = restore(project, "--execute")
    assert again.returncode == 0 and "already" in again.stdout


def test_without_the_store_the_committed_blob_is_used_when_its_hash_fits(project: Path) -> None:
    import shutil

    shutil.rmtree(project / "snapshots" / ".store")
    (project / "code" / "model.py").write_text("hacked\n")
    done = restore(project, "--execute", "--format", "json")
    assert done.returncode == 0, done.stdout
    (item,) = [i for i in json.loads(done.stdout)["items"] if i["kind"] == "file"]
    assert "from git" in item["detail"] and item["status"] == "restored"
    assert (project / "code" / "model.py").read_text() == "good = 1\n"


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_missing_or_damaged_blob_fails_that_item_and_leaves_the_file(
    project: Path, damage: str
) -> None:
    (blob,) = (project / "snapshots" / ".store" / "sha256").rglob("*/*")
    blob.chmod(0o644)
    if damage == "missing":
        blob.unlink()
    else:
        blob.write_text("not the content\n")
    snap = project / "snapshots" / "good.json"  # and no recorded commit to take it from
    data = json.loads(snap.read_text())
    data["repos"] = []
    snap.write_text(json.dumps(data))
    (project / "code" / "model.py").write_text("hacked\n")
    done = restore(project, "--execute")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "failed" in done.stdout and "Traceback" not in done.stderr
    assert (project / "code" / "model.py").read_text() == "hacked\n"


def test_a_snapshot_naming_a_file_outside_is_refused_not_written(
    project: Path, tmp_path: Path
) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("mine\n")
    snap = project / "snapshots" / "good.json"
    data = json.loads(snap.read_text())
    data["files"][0].update(path=str(outside), root=None, rel=None)
    snap.write_text(json.dumps(data))
    done = restore(project, "--execute")
    assert done.returncode == 1 and "refused" in done.stdout
    assert outside.read_text() == "mine\n"
    outside.unlink()


def test_install_refuses_wrong_content_and_non_files(tmp_path: Path) -> None:
    dest = tmp_path / "f.txt"
    dest.write_text("old\n")
    staged = apply.stage({"dest": str(dest), "data": base64.b64encode(b"new\n").decode()})["path"]
    wrong = apply.install_file(
        {"staged": staged, "dest": str(dest), "sha256": "0" * 64, "stamp": "s"}
    )
    assert not wrong["ok"] and dest.read_text() == "old\n" and not os.path.exists(staged)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    staged = apply.stage({"dest": str(fifo), "data": base64.b64encode(b"x").decode()})["path"]
    sha = hashlib.sha256(b"x").hexdigest()
    refused = apply.install_file({"staged": staged, "dest": str(fifo), "sha256": sha, "stamp": "s"})
    assert not refused["ok"] and "not a regular file" in refused["error"]
    assert apply.put({"path": str(dest), "data": "eA=="})["ok"] is False  # only staged files


def _archive(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _member(name: str, data: bytes | None = b"k", kind: bytes = tarfile.REGTYPE) -> Any:
    info = tarfile.TarInfo(name)
    info.type = kind
    if data is not None:
        info.size = len(data)
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    return info, data


def test_a_hostile_cache_archive_writes_only_below_the_cache(tmp_path: Path) -> None:
    data = _archive(
        [
            _member("good/kernel.bin"),
            _member("../escape.txt"),
            _member("/abs.txt"),
            _member("link", None, tarfile.SYMTYPE),
        ]
    )
    dest = tmp_path / "cache"
    staged = apply.stage({"dest": str(dest), "data": base64.b64encode(data).decode()})["path"]
    sha = hashlib.sha256(data).hexdigest()
    done = apply.extract(
        {"staged": staged, "dest": str(dest), "sha256": sha, "files": 1, "bytes": 1, "stamp": "s"}
    )
    assert done["ok"] and done["skipped"] == 3, done
    assert sorted(p.name for p in dest.rglob("*")) == ["good", "kernel.bin"]
    assert not (tmp_path / "escape.txt").exists() and not Path("/abs.txt").exists()


@pytest.mark.parametrize("bad", ["count", "damaged", "hash", "bomb"])
def test_a_cache_that_does_not_verify_leaves_the_old_one(tmp_path: Path, bad: str) -> None:
    dest = tmp_path / "cache"
    dest.mkdir()
    (dest / "old.bin").write_text("old")
    data = _archive([_member("a.bin")])
    if bad == "bomb":  # more than was kept: unpacking stops at the recorded size
        data = _archive([_member("a.bin", b"k" * 100000)])
    if bad == "damaged":
        data = data[: len(data) // 2]
    sha = hashlib.sha256(data).hexdigest() if bad != "hash" else "0" * 64
    staged = apply.stage({"dest": str(dest), "data": base64.b64encode(data).decode()})["path"]
    files = 2 if bad == "count" else 1
    done = apply.extract(
        {
            "staged": staged,
            "dest": str(dest),
            "sha256": sha,
            "files": files,
            "bytes": 1,
            "stamp": "s",
        }
    )
    assert not done["ok"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # nothing staged is left
    assert [p.name for p in dest.iterdir()] == ["old.bin"]


def test_the_variables_file_quotes_values_and_writes_no_secret_or_loader() -> None:
    snap = loads(
        json.dumps(
            {
                "name": "good",
                "created": "2026-01-01T00:00:00Z",
                "host": "h",
                "user": "u",
                "envguard_version": "0",
                "interpreter": {
                    "version": "3.11.7",
                    "implementation": "cpython",
                    "executable": "/x/python",
                    "prefix": "/x",
                    "base_prefix": "/x",
                    "is_venv": False,
                    "os": "linux",
                    "machine": "x86_64",
                },
                "env": {
                    "NCCL_DEBUG": "$(touch /tmp/pwned)'; echo",
                    "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123",
                    "LD_PRELOAD": "/tmp/evil.so",
                    "VIRTUAL_ENV": "/x",
                },
            }
        ),
        source="t",
    )
    text, left_out = env_file_text(snap, {"CUDA_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "x"})
    assert left_out == ["HF_TOKEN"] and "hf_abc" not in text
    assert f"export NCCL_DEBUG={shlex.quote(snap.env['NCCL_DEBUG'])}" in text
    assert (
        "\nexport LD_PRELOAD" not in text and "# review, then uncomment: export LD_PRELOAD" in text
    )
    assert "unset CUDA_VISIBLE_DEVICES" in text and "VIRTUAL_ENV" not in text
    out = subprocess.run(
        ["sh", "-c", text + 'printf %s "$NCCL_DEBUG"'], capture_output=True, text=True, check=True
    )
    assert out.stdout == snap.env["NCCL_DEBUG"] and not Path("/tmp/pwned").exists()


def test_the_variables_file_restores_them_as_the_measured_process_started() -> None:
    """A snapshot taken by the API inside a script holds what torch and cv2 set in that
    process since it started (env_at_start: the values before). The file restores the
    start: exporting cv2's LD_LIBRARY_PATH would put its libraries first for every program,
    and a variable the script unset after Python read it is exported as it was."""
    snap = made_snapshot(
        [],
        env={"TORCHINDUCTOR_CACHE_DIR": "/tmp/ti", "NCCL_ALGO": "Ring",
             "LD_LIBRARY_PATH": "/v/cv2/../../lib64:/opt/cuda/lib64"},
        env_at_start={"TORCHINDUCTOR_CACHE_DIR": None, "LD_LIBRARY_PATH": "/opt/cuda/lib64",
                      "CUDA_VISIBLE_DEVICES": "0,1"},
    )  # fmt: skip
    text, _ = env_file_text(snap, {"TORCHINDUCTOR_CACHE_DIR": "/x", "NCCL_DEBUG": "INFO"})
    assert "export NCCL_ALGO=Ring" in text and "unset NCCL_DEBUG" in text
    assert "export CUDA_VISIBLE_DEVICES=0,1" in text
    assert "unset TORCHINDUCTOR_CACHE_DIR" in text and "cv2" not in text
    assert "LD_LIBRARY_PATH=/opt/cuda/lib64" in text  # held for review (it loads code)
    assert run_env(snap) == {"NCCL_ALGO": "Ring", "CUDA_VISIBLE_DEVICES": "0,1"}


def test_repos_are_checked_out_at_the_recorded_commit_with_the_work_stashed(project: Path) -> None:
    code = project / "code"
    (code / "model.py").write_text("new work\n")
    (code / "notes.txt").write_text("untracked\n")
    _git(code, "commit", "-qam", "later")
    (code / "model.py").write_text("uncommitted\n")
    done = restore(project, "--repos", "--execute")
    assert done.returncode == 0, done.stdout + done.stderr
    stash_sha = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "stash@{0}"], capture_output=True, text=True
    ).stdout.strip()
    assert f"kept: stash {stash_sha[:12]} in {code}" in done.stdout
    recorded = json.loads((project / "snapshots" / "good.json").read_text())["repos"][0]["head"]
    head = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert head == recorded and (code / "model.py").read_text() == "good = 1\n"
    stash = subprocess.run(
        ["git", "-C", str(code), "stash", "show", "-p", "--include-untracked", "stash@{0}"],
        capture_output=True,
        text=True,
    ).stdout
    assert "uncommitted" in stash and "untracked" in stash


def test_the_checkout_of_an_editable_install_is_left_alone(tmp_path: Path) -> None:
    """The test venv has envguard installed editable: its checkout is recorded, and
    --repos must not check it out (a near miss while this was written)."""
    done = envguard("snapshot", "--python", sys.executable, "--name", "good", cwd=tmp_path)
    assert done.returncode == 0
    out = envguard(
        "restore", "good", "--venv", sys.prefix, "--repos", "--format", "json", cwd=tmp_path
    )
    repos = [i for i in json.loads(out.stdout)["items"] if i["kind"] == "repo"]
    assert all(i["status"] == "skipped" for i in repos), repos


def test_a_repo_without_the_recorded_commit_is_refused(project: Path) -> None:
    snap = project / "snapshots" / "good.json"
    data = json.loads(snap.read_text())
    data["repos"][0]["head"] = "1" * 40
    snap.write_text(json.dumps(data))
    done = restore(project, "--repos", "--execute")
    assert done.returncode == 1 and "is not in" in done.stdout


def test_a_fleet_restore_reports_every_host_and_fails_for_the_one_down(tmp_path: Path) -> None:
    done = envguard(
        "snapshot", "--python", sys.executable, "--name", "good", cwd=tmp_path,
        env={"NCCL_P2P_DISABLE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for host in ("n1", "n2"):
        (tmp_path / host).mkdir()
    prefix = tmp_path / "fake-ssh"
    prefix.write_text(f'#!/bin/sh\nhost=$1; shift\ncd {tmp_path}/"$host" || exit 255\nexec "$@"\n')
    prefix.chmod(0o755)
    out = envguard(
        "restore", "good", "--hosts", "n1,n2,down", "--via", f"{prefix} {{host}}",
        "--python", sys.executable, "--venv", sys.prefix, "--execute", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "2 of 3 hosts restored; not: down" in out.stdout
    for host in ("n1", "n2"):
        assert "export NCCL_P2P_DISABLE=1" in (tmp_path / host / "good.env.sh").read_text()


def test_a_cache_larger_than_the_free_space_is_refused_before_unpacking(tmp_path: Path) -> None:
    data = _archive([_member("a.bin")])
    dest = tmp_path / "cache"
    staged = apply.stage({"dest": str(dest), "data": base64.b64encode(data).decode()})["path"]
    sha = hashlib.sha256(data).hexdigest()
    args = {"staged": staged, "dest": str(dest), "sha256": sha, "files": 1, "bytes": 1 << 60}
    done = apply.extract({**args, "stamp": "s"})
    assert not done["ok"] and "nothing was changed" in done["error"]
    assert list(tmp_path.iterdir()) == []


def test_through_a_prefix_files_and_caches_are_kept_and_restored(tmp_path: Path) -> None:
    """snapshot --via --keep-files --keep-cache reads them on the far side (the cache comes
    back as a tarball streamed into the store); restore --via puts them back there."""
    box = tmp_path / "box"
    cache = box / "inductor"
    (cache / "fx").mkdir(parents=True)
    (cache / "fx" / "graph.bin").write_bytes(os.urandom(70000))
    (box / "train.py").write_text("good\n")
    prefix = tmp_path / "fake-pct"
    prefix.write_text(f'#!/bin/sh\ncd {box} && TORCHINDUCTOR_CACHE_DIR={cache} exec "$@"\n')
    prefix.chmod(0o755)
    via = ["--via", str(prefix), "--python", sys.executable]
    done = envguard(
        "snapshot", *via, "--name", "good", "--file", str(box / "train.py"), "--root", str(box),
        "--keep-files", "--keep-cache", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "snapshots" / "good.json").read_text())
    (kept,) = [c for c in data["caches"] if c["kind"] == "inductor"]
    assert kept["archive"]["files"] == 1 and kept["archive"]["bytes"] == 70000
    assert data["files"][0]["rel"] == "train.py"
    import shutil

    shutil.rmtree(cache)
    (box / "train.py").write_text("hacked\n")
    out = envguard(
        "restore", "good", *via, "--venv", sys.prefix, "--execute", "--format", "json",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    statuses = {i["kind"]: i["status"] for i in json.loads(out.stdout)["items"]}
    assert statuses | {"env": "-"} == {
        "packages": "already",
        "file": "restored",
        "cache": "restored",
        "env": "-",
    }
    assert (box / "train.py").read_text() == "good\n"
    assert len((cache / "fx" / "graph.bin").read_bytes()) == 70000


def test_a_script_comes_back_executable_as_it_was_recorded(project: Path) -> None:
    """The snapshot records each tracked file's mode: a restored script keeps its x bit,
    with the content and without it."""
    script = project / "code" / "model.py"
    os.chmod(script, 0o755)
    done = envguard(
        "snapshot", "--python", sys.executable, "--name", "good", "--force",
        "--file", "code/model.py", "--keep-files", cwd=project,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    script.write_text("good = 1\nhack = 1\n")
    os.chmod(script, 0o644)
    assert restore(project, "--execute").returncode == 0
    assert script.read_text() == "good = 1\n" and os.stat(script).st_mode & 0o111
    os.chmod(script, 0o644)  # the same content, only the bit lost
    assert restore(project, "--execute").returncode == 0
    assert os.stat(script).st_mode & 0o111


def test_a_recorded_mode_never_sets_a_special_bit(tmp_path: Path) -> None:
    """A forged snapshot's mode 0o6777 gives an executable file under the umask, never a
    setuid, setgid or sticky one; nonsense modes are ignored."""
    for mode, executable in ((0o6777, True), (0o644, False), (-1, False), ("755", False)):
        dest = tmp_path / f"f{executable}{mode!r}.sh"
        data = b"#!/bin/sh\n"
        staged = apply.stage({"dest": str(dest), "data": base64.b64encode(data).decode()})
        sha = hashlib.sha256(data).hexdigest()
        done = apply.install_file(
            {"staged": staged["path"], "dest": str(dest), "sha256": sha, "stamp": "s", "mode": mode}
        )
        assert done["ok"], done
        got = os.stat(dest).st_mode
        assert not got & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX)
        assert bool(got & 0o111) is executable, (mode, oct(got))


def test_bisect_finds_no_variables_step_in_what_a_run_set_itself() -> None:
    """Bisect's steps compare the runs as they started (restore.started): a variable the
    good run's own script set after it started (torch.compile) is no step to try, and a
    candidate given the bad side's variables starts as the bad run did."""
    from envguard.recovery.bisect.changes import candidate, units

    good = made_snapshot(
        [],
        env={"TORCHINDUCTOR_CACHE_DIR": "/tmp/ti"},
        env_at_start={"TORCHINDUCTOR_CACHE_DIR": None},
    )
    assert [u.id for u in units(good, made_snapshot([], env={}))] == []
    # alike as measured (a launcher set it, then its child ran): no step, as diff says none
    launcher = made_snapshot([], env={"NCCL_ALGO": "Ring"}, env_at_start={"NCCL_ALGO": None})
    assert units(launcher, made_snapshot([], env={"NCCL_ALGO": "Ring"})) == []
    bad = made_snapshot([], env={"NCCL_ALGO": "Tree"})
    (step,) = units(good, bad)
    assert step.id == "env"
    assert run_env(candidate(good, bad, [step])) == {"NCCL_ALGO": "Tree"}
