"""restore against a hostile snapshot, store or far side: each hole a review found, closed by
a mechanism (write-time confinement in probe/target/apply.refused, validated names, shapes
and variables), and held here."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from envguard.probe.payload import local_package
from factories import git

apply = local_package().apply


def envguard(*args: str | Path, cwd: Path, timeout: float = 120) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "envguard", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a kept model script and a kept cache; ``outside`` holds the victims."""
    p = tmp_path / "p"
    code = p / "code"
    code.mkdir(parents=True)
    (code / "model.py").write_text("good = 1\n")
    git(code, "init", "-q")
    git(code, "add", "-A")
    git(code, "commit", "-qm", "good")
    (p / "cache").mkdir()
    (p / "cache" / "k.bin").write_bytes(b"kernel" * 100)
    done = envguard(
        "snapshot", "--python", sys.executable, "--name", "good", "--file", "code/model.py",
        "--repo", "code", "--cache", "cache", "--keep-files", "--keep-cache", cwd=p,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (tmp_path / "outside").mkdir()
    edit(p, lambda d: d.update(repos=[r for r in d["repos"] if r["path"] == str(code)]))
    return p


def edit(project: Path, change: Any) -> dict[str, Any]:
    path = project / "snapshots" / "good.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return data


def restore(project: Path, *args: str) -> Any:
    return envguard("restore", "good", "--venv", sys.prefix, "--format", "json", *args, cwd=project)


def _items(out: Any) -> dict[str, str]:
    assert "Traceback" not in out.stderr, out.stderr
    return {f"{i['kind']} {i['name']}": i["status"] for i in json.loads(out.stdout)["items"]}


@pytest.mark.slow
def test_unnormalised_paths_cannot_lead_a_write_outside(project: Path) -> None:
    outside = project.parent / "outside"
    victim = outside / "victim.sh"
    victim.write_text("mine\n")
    (outside / "victimdir").mkdir()
    (outside / "victimdir" / "keep").write_text("mine\n")
    repo = outside / "victimrepo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a").write_text("1")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    (repo / "a").write_text("2")
    git(repo, "commit", "-qam", "two")
    first = git(repo, "rev-parse", "HEAD~1")

    def hostile(d: dict[str, Any]) -> None:
        d["files"][0].update(path="code/../../outside/victim.sh", rel=None, root=None)
        (cache,) = [c for c in d["caches"] if c.get("archive")]
        cache["path"] = str(project) + "/./../outside/victimdir"
        d["repos"] = [{"path": str(project) + "/../outside/victimrepo", "head": first}]

    edit(project, hostile)
    out = restore(project, "--execute", "--repos")
    assert out.returncode == 1
    assert {s for k, s in _items(out).items() if not k.startswith("env ")} == {
        "already",
        "refused",
    }
    assert victim.read_text() == "mine\n"
    assert (outside / "victimdir" / "keep").read_text() == "mine\n"
    assert git(repo, "rev-parse", "HEAD") != first and (repo / "a").read_text() == "2"


def test_a_symlinked_folder_is_judged_where_it_leads_at_write_time(tmp_path: Path) -> None:
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    (inside / "sub").symlink_to(outside)
    confine = {"cwd": str(inside), "allow": []}
    dest = str(inside / "sub" / "model.py")
    data = base64.b64encode(b"x").decode()
    assert "not written" in apply.stage({"dest": dest, "data": data, "confine": confine})["error"]
    staged = apply.stage({"dest": str(inside / "m.py"), "data": data})["path"]
    sha = hashlib.sha256(b"x").hexdigest()
    args = {"staged": staged, "dest": dest, "sha256": sha, "stamp": "s", "confine": confine}
    assert not apply.install_file(args)["ok"] and list(outside.iterdir()) == []


@pytest.mark.slow
def test_a_snapshot_name_cannot_place_the_variables_file(project: Path) -> None:
    edit(project, lambda d: d.update(name="../outside/evil", env={"NCCL_DEBUG": "INFO"}))
    out = restore(project, "--execute")
    assert "Traceback" not in out.stderr
    assert not (project.parent / "outside" / "evil.env.sh").exists()
    assert (project / "_outside_evil.env.sh").exists()  # a plain name in the cwd


def test_a_head_that_is_not_a_commit_id_is_refused(project: Path) -> None:
    edit(project, lambda d: d["repos"][0].update(head="HEAD~1"))
    (project / "code" / "model.py").write_text("mine\n")
    out = restore(project, "--execute", "--repos")
    repos = [i for i in json.loads(out.stdout)["items"] if i["kind"] == "repo"]
    assert repos[0]["status"] == "refused" and "not a commit id" in repos[0]["detail"]


def test_variables_that_run_code_are_never_exported(project: Path) -> None:
    evil = {"BASH_ENV": "/tmp/x.sh", "LD_AUDIT": "/tmp/a.so", "PROMPT_COMMAND": "id", "ENV": "x"}
    # recorded, and each imports or changes code at every start: held for review
    evil.update(PYTHONWARNINGS="ignore::antigravity.X", PYTHONOPTIMIZE="2")
    edit(project, lambda d: d.update(env={**evil, "NCCL_DEBUG": "INFO"}))
    out = envguard(
        "restore", "good", "--venv", sys.prefix, "--execute",
        "--then", f"{sys.executable} -c 'import os,sys; print(sorted(os.environ))'", cwd=project,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    text = (project / "good.env.sh").read_text()
    held = ("LD_AUDIT", "PYTHONWARNINGS", "PYTHONOPTIMIZE")
    unrecorded = [name for name in evil if name not in held]
    assert "NCCL_DEBUG" in text and not any(name in text for name in unrecorded)
    for name in held:  # recorded (LD_AUDIT loads code as LD_PRELOAD does): held for review
        assert f"\nexport {name}" not in text
        assert f"# review, then uncomment: export {name}=" in text
    printed = out.stdout.rsplit("\n", 2)[-2]
    assert "NCCL_DEBUG" in printed and not any(f"'{n}'" in printed for n in evil)


def test_a_sha256_that_is_a_path_is_bad_input(project: Path) -> None:
    edit(project, lambda d: d["files"][0].update(sha256="../../../../etc/passwd"))
    out = restore(project)
    assert out.returncode == 2 and out.stderr.startswith("error:"), out.stderr


def test_a_fifo_in_the_store_fails_the_item_without_hanging(project: Path) -> None:
    data = json.loads((project / "snapshots" / "good.json").read_text())
    sha = data["files"][0]["sha256"]
    blob = project / "snapshots" / ".store" / "sha256" / sha[:2] / sha
    blob.unlink()
    os.mkfifo(blob)
    edit(project, lambda d: d.update(repos=[]))  # and no commit to fall back on
    (project / "code" / "model.py").write_text("hacked\n")
    out = restore(project, "--execute")
    assert out.returncode == 1 and _items(out)["file code/model.py"] == "failed"


def _deep_archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("a/" * 1500 + "f")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    return buf.getvalue()


def test_a_member_nested_thousands_deep_is_no_traceback(tmp_path: Path) -> None:
    data = _deep_archive()
    dest = tmp_path / "cache"
    staged = apply.stage({"dest": str(dest), "data": base64.b64encode(data).decode()})["path"]
    sha = hashlib.sha256(data).hexdigest()
    done = apply.extract(
        {"staged": staged, "dest": str(dest), "sha256": sha, "files": 1, "bytes": 1, "stamp": "s"}
    )
    assert not done["ok"] and "holds 0 files" in done["error"]  # skipped, not unpacked
    assert list(tmp_path.iterdir()) == []


def test_another_users_inductor_folder_is_never_written(project: Path) -> None:
    def other(d: dict[str, Any]) -> None:
        (cache,) = [c for c in d["caches"] if c.get("archive")]
        cache["path"] = "/tmp/torchinductor_victimuser"

    edit(project, other)
    out = restore(project, "--execute")
    assert out.returncode == 1 and not Path("/tmp/torchinductor_victimuser").exists()


@pytest.mark.parametrize(
    "answer",
    [
        '{"ok": true}',
        '{"ok": true, "files": []}',
        '{"ok": "yes"}',
        "[1]",
        '{"ok": true, "files": {"/x": 5}}',
    ],
)
def test_a_far_side_with_malformed_answers_gets_one_line(tmp_path: Path, answer: str) -> None:
    (tmp_path / "m.py").write_text("x\n")
    liar = tmp_path / "liar"
    # The probe answers truthfully (its program reads 'main'); every apply operation lies.
    liar.write_text(
        "#!/bin/sh\nprogram=$(cat)\n"
        'case "$program" in *"_pkg.apply.main"*) printf %s \'' + answer + "'; exit 0;; esac\n"
        f'printf %s "$program" | exec {sys.executable} -I -S -\n'
    )
    liar.chmod(0o755)
    out = envguard(
        "snapshot", "--via", str(liar), "--python", sys.executable, "--file", str(tmp_path / "m.py"),
        "--keep-files", "--out", "s.json", cwd=tmp_path,
    )  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode in (0, 1, 2) and len(out.stderr.strip().splitlines()) <= 3, out.stderr


def test_restoring_a_repo_runs_no_program_its_config_names(project: Path) -> None:
    code = project / "code"
    marker = project.parent / "ran"
    git(code, "config", "core.fsmonitor", f"touch {marker}; false")
    git(code, "config", "core.hooksPath", str(project.parent))
    hook = project.parent / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    (code / "model.py").write_text("dirty\n")
    out = restore(project, "--repos", "--execute")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not marker.exists()


def _kept_archive(project: Path, members: dict[str, tuple[bytes, int]]) -> dict[str, Any]:
    """An archive put in the project's store; the snapshot's kept cache points at it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, (data, mode) in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    sha = hashlib.sha256(data).hexdigest()
    blob = project / "snapshots" / ".store" / "sha256" / sha[:2] / sha
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    size = sum(len(d) for d, _ in members.values())
    return {"sha256": sha, "files": len(members), "bytes": size, "compressed": len(data)}


@pytest.mark.parametrize("where", ["cwd", "hooks", "home"])
def test_a_cache_cannot_replace_the_project_a_hooks_folder_or_home(
    project: Path, where: str
) -> None:
    target = {
        "cwd": str(project),
        "hooks": str(project / "code" / ".git" / "hooks"),
        "home": os.path.expanduser("~"),
    }[where]
    archive = _kept_archive(project, {"pre-commit": (b"#!/bin/sh\ntouch /tmp/pwned\n", 0o755)})

    def hostile(d: dict[str, Any]) -> None:
        (cache,) = [c for c in d["caches"] if c.get("archive")]
        cache.update(path=target, archive=archive)

    edit(project, hostile)
    out = restore(project, "--execute", "--allow", str(project))
    caches = [i for i in json.loads(out.stdout)["items"] if i["kind"] == "cache"]
    assert out.returncode == 1 and caches[0]["status"] in ("refused", "failed"), caches
    assert (project / "snapshots" / "good.json").exists() and (project / "code").is_dir()


def test_unpacked_files_are_never_executable(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("run.sh")
        info.size, info.mode = 3, 0o755
        tar.addfile(info, io.BytesIO(b"x=1"))
    data = buf.getvalue()
    staged = apply.stage({"dest": str(tmp_path / "c"), "data": base64.b64encode(data).decode()})
    done = apply.extract(
        {"staged": staged["path"], "dest": str(tmp_path / "c"), "sha256":
         hashlib.sha256(data).hexdigest(), "files": 1, "bytes": 3, "stamp": "s"}
    )  # fmt: skip
    assert done["ok"] and not os.access(tmp_path / "c" / "run.sh", os.X_OK)


def test_a_far_side_in_slash_or_home_has_no_working_directory_to_write_in(tmp_path: Path) -> None:
    for cwd in ("/", os.path.expanduser("~")):
        why = apply.refused(str(tmp_path / "model.py"), {"confine": {"cwd": cwd, "allow": []}})
        assert why and "not written" in why
    assert "inside a .git folder" in apply.refused(
        str(tmp_path / ".git" / "config"), {"confine": {"cwd": str(tmp_path), "allow": []}}
    )


@pytest.mark.slow
def test_an_archive_of_huge_names_or_a_million_folders_stops_early(tmp_path: Path) -> None:
    for make in ("name", "folders"):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
            if make == "name":
                info = tarfile.TarInfo("n" * 300000)
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))
            else:
                for i in range(30000):
                    info = tarfile.TarInfo(f"d{i}")
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
        data = buf.getvalue()
        dest = tmp_path / make
        staged = apply.stage({"dest": str(dest), "data": base64.b64encode(data).decode()})
        done = apply.extract(
            {"staged": staged["path"], "dest": str(dest), "sha256":
             hashlib.sha256(data).hexdigest(), "files": 0, "bytes": 0, "stamp": "s"}
        )  # fmt: skip
        assert not done["ok"] and len(done["error"]) <= 500
        assert not dest.exists()


def test_variables_that_load_code_are_commented_out_and_escapes_dropped(project: Path) -> None:
    edit(
        project,
        lambda d: d.update(
            env={
                "CUDA_INJECTION64_PATH": "/x.so",
                "NCCL_NET_PLUGIN": "evil",
                "NCCL_DEBUG": "INFO\x1b]0;pwn\x07",
                "NCCL_ALGO": "Ring",
            }
        ),
    )
    out = restore(project, "--execute")
    text = (project / "good.env.sh").read_text()
    assert "\nexport NCCL_ALGO=Ring" in text and "\x1b" not in text
    assert "# review, then uncomment: export CUDA_INJECTION64_PATH" in text
    assert "# review, then uncomment: export NCCL_NET_PLUGIN" in text
    assert "Traceback" not in out.stderr


def test_the_stash_of_repos_leaves_the_snapshot_folder_in_place(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "conf.yaml").write_text("lr: 1\n")
    git(code, "init", "-q")
    git(code, "add", "-A")
    git(code, "commit", "-qm", "one")
    done = envguard(
        "snapshot", "--python", sys.executable, "--name", "good", "--file", "conf.yaml",
        "--keep-files", cwd=code,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    edit(code, lambda d: d.update(repos=[r for r in d["repos"] if r["path"] == str(code)]))
    (code / "conf.yaml").write_text("lr: 9\n")
    git(code, "commit", "-qam", "two")
    (code / "conf.yaml").write_text("lr: 99\n")  # dirty: stashed first
    out = envguard("restore", "good", "--venv", sys.prefix, "--repos", "--execute", cwd=code)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (code / "conf.yaml").read_text() == "lr: 1\n"
    assert (code / "snapshots" / "good.json").exists()


def test_restoring_a_repo_runs_no_filter_a_committed_gitattributes_routes_to(
    tmp_path: Path,
) -> None:
    """A committed .gitattributes sends every file through a filter driver the user's git
    config defines (git-lfs, or anything): restore's stash and checkout run none of its
    programs, and the checkout writes the committed blobs as they are."""
    p = tmp_path / "p"
    code = p / "code"
    code.mkdir(parents=True)
    (code / ".gitattributes").write_text("* filter=evil\n")
    (code / "model.py").write_text("good = 1\n")
    git(code, "init", "-q")
    git(code, "add", "-A")
    git(code, "commit", "-qm", "good")
    done = envguard("snapshot", "--python", sys.executable, "--name", "good", "--repo", "code",
                    cwd=p)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (code / "model.py").write_text("bad = 1\n")
    git(code, "commit", "-qam", "bad")
    (code / "model.py").write_text("dirty = 1\n")  # the stash runs the clean filter on it
    marker = tmp_path / "ran"
    for kind in ("clean", "smudge", "process"):
        git(code, "config", f"filter.evil.{kind}", f'sh -c "echo {kind} >> {marker}; cat"')
    git(code, "config", "filter.evil.required", "true")
    out = envguard("restore", "good", "--venv", sys.prefix, "--format", "json", "--repos",
                   "--execute", cwd=p)  # fmt: skip
    assert not marker.exists(), marker.read_text()
    assert _items(out)[f"repo {code}"] == "restored", out.stdout + out.stderr
    assert (code / "model.py").read_text() == "good = 1\n"


def test_a_row_is_labelled_with_what_it_writes_not_with_the_snapshots_rel(
    project: Path,
) -> None:
    """A forged ``rel`` must not make the row say one file while another is written."""
    edit(project, lambda d: d["files"][0].update(rel="/etc/cron.d/x"))
    (project / "code" / "model.py").write_text("drifted\n")
    out = restore(project, "--execute")
    assert "/etc/cron.d" not in out.stdout
    assert _items(out)["file code/model.py"] == "restored"
    assert (project / "code" / "model.py").read_text() == "good = 1\n"


def _kept_twice(tmp_path: Path) -> Path:
    """A project whose `--cache DIR` is also $TORCHINDUCTOR_CACHE_DIR, kept, then drifted."""
    p = tmp_path / "p"
    (p / "cache").mkdir(parents=True)
    (p / "cache" / "k.bin").write_bytes(b"kernel")
    done = subprocess.run(
        [sys.executable, "-m", "envguard", "snapshot", "--python", sys.executable, "--name",
         "good", "--cache", "cache", "--keep-cache"],
        cwd=p, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(p / "cache")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (p / "cache" / "k.bin").write_bytes(b"other")
    return p


def _restore_twice(p: Path) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "envguard", "restore", "good", "--venv", sys.prefix, "--allow",
         "cache", "--execute", "--format", "json"],
        cwd=p, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(p / "cache")},
    )  # fmt: skip


def test_a_cache_named_twice_is_recorded_once_and_restores_cleanly(tmp_path: Path) -> None:
    p = _kept_twice(tmp_path)
    caches = json.loads((p / "snapshots" / "good.json").read_text())["caches"]
    assert [c["kind"] for c in caches if c["path"] == str(p / "cache")] == ["inductor"]
    out = _restore_twice(p)
    assert out.returncode == 0, out.stdout + out.stderr
    assert _items(out)["cache inductor cache"] == "restored"
    assert (p / "cache" / "k.bin").read_bytes() == b"kernel"


def test_a_cache_recorded_twice_by_an_older_envguard_is_restored_once(tmp_path: Path) -> None:
    p = _kept_twice(tmp_path)
    path = p / "snapshots" / "good.json"
    data = json.loads(path.read_text())
    (inductor,) = [c for c in data["caches"] if c["path"] == str(p / "cache")]
    data["caches"].append({**inductor, "kind": "user"})
    path.write_text(json.dumps(data))
    out = _restore_twice(p)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [k for k in _items(out) if k.startswith("cache ")] == ["cache inductor cache"]
    assert (p / "cache" / "k.bin").read_bytes() == b"kernel"


def test_a_small_cache_says_its_size_in_kb_or_bytes(tmp_path: Path, monkeypatch: Any) -> None:
    """Not "0 MB free, the cache needs 0 MB" when both are under a megabyte."""

    class Full:
        f_bavail, f_frsize = 3, 4096

    monkeypatch.setattr(apply.os, "statvfs", lambda _: Full)
    args = {"staged": str(tmp_path / "none"), "dest": str(tmp_path / "c"), "sha256": "0" * 64,
            "stamp": "s", "files": 1, "bytes": 20 << 10}  # fmt: skip
    error = apply.extract(args)["error"]
    assert "12 KB free, the cache needs 20 KB" in error, error
