"""Snapshots of real venvs built offline from tiny wheels."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from envguard.errors import UsageError
from envguard.snapshots import store
from envguard.snapshots.capture import capture_snapshot
from envguard.snapshots.models import Snapshot
from envguard.snapshots.request import CaptureRequest
from factories import (
    git,
    make_git_repo,
    make_project,
    make_wheel,
    pip_install,
    uv_freeze,
    uv_install,
)


def snap_of(venv: Path, tmp_path: Path, **kwargs: object) -> Snapshot:
    request = CaptureRequest(python=venv / "bin" / "python", name="t", cwd=tmp_path, **kwargs)  # type: ignore[arg-type]
    return capture_snapshot(request)


def pairs(snap: Snapshot) -> set[tuple[str, str]]:
    """The snapshot's packages in the shape of `uv pip freeze` lines."""
    out = set()
    for p in snap.packages:
        s = p.source
        if s.kind == "editable":
            out.add(("-e", s.url or ""))
        elif s.kind == "vcs":
            out.add((p.name, f"@{s.vcs}+{s.url}@{s.commit}"))
        elif s.kind in ("url", "dir"):
            out.add((p.name, f"@{s.url}"))
        else:
            out.add((p.name, p.version))
    return out


def test_package_set_matches_uv_freeze_with_editable_and_vcs(
    tmp_path: Path, good_venv: Path, wheelhouse: Path
) -> None:
    proj = make_project(tmp_path / "proj", "my-model", "0.3.0")
    vcs = make_project(tmp_path / "vcsdep", "vcs-dep", "1.2.0")
    uv_install(good_venv, wheelhouse, "-e", str(proj))
    uv_install(good_venv, wheelhouse, f"vcs-dep @ git+file://{vcs}")
    snap = snap_of(good_venv, tmp_path)
    assert pairs(snap) == uv_freeze(good_venv)
    by = snap.package_map()
    assert by["my-model"].source.kind == "editable"
    assert by["my-model"].source.path == str(proj)
    assert by["vcs-dep"].source.kind == "vcs"
    assert by["vcs-dep"].source.commit == git(vcs, "rev-parse", "HEAD")
    assert by["torch"].version == "2.11.0+cu128"
    assert by["torch"].installer == "uv" and by["torch"].requested
    # the editable project's repo is recorded without asking
    assert str(proj) in {r.path for r in snap.repos}


def test_fingerprint_same_wheel_pip_and_uv_equal_rebuilt_wheel_differs(
    tmp_path: Path, venv_factory: Callable[..., Path]
) -> None:
    pytest.importorskip("pip", minversion="22.3")  # pip --python
    wh = tmp_path / "wh"
    wheel = make_wheel(wh, "demo", "1.0", scripts={"demo": "demo:main"})
    rebuilt = make_wheel(tmp_path / "wh2", "demo", "1.0", salt="rebuilt")
    by_uv = venv_factory("uv-venv")
    uv_install(by_uv, wh, "demo==1.0")
    by_pip = venv_factory("pip-venv")
    pip_install(by_pip, wheel)
    by_uv_rebuilt = venv_factory("rebuilt-venv")
    uv_install(by_uv_rebuilt, rebuilt.parent, "demo==1.0")
    fp = {
        v.name: snap_of(v, tmp_path).package_map()["demo"] for v in (by_uv, by_pip, by_uv_rebuilt)
    }
    assert fp["uv-venv"].installer == "uv" and fp["pip-venv"].installer == "pip"
    assert fp["uv-venv"].fingerprint == fp["pip-venv"].fingerprint
    assert fp["rebuilt-venv"].fingerprint != fp["uv-venv"].fingerprint


def test_torch_build_read_without_importing_torch(tmp_path: Path, good_venv: Path) -> None:
    snap = snap_of(good_venv, tmp_path)
    assert snap.torch is not None
    assert (snap.torch.version, snap.torch.cuda, snap.torch.hip) == ("2.11.0+cu128", "12.8", None)
    assert (snap.torch.cudnn, snap.torch.nccl, snap.torch.triton) == ("9.1.0.70", "2.21.5", "3.1.0")
    assert snap.interpreter.is_venv and snap.interpreter.executable.startswith(str(good_venv))
    assert snap.interpreter.markers["python_version"].count(".") == 1


def test_secrets_never_reach_the_snapshot(
    tmp_path: Path, good_venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "hf_Zq8vT3kPLANTEDsecretValue"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("WANDB_API_KEY", "wandb-" + secret)
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"https://user:{secret}@pypi.example/simple")
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    repo = make_git_repo(tmp_path / "code")
    git(repo, "remote", "add", "origin", f"https://x-token:{secret}@github.com/org/code.git")
    snap = snap_of(good_venv, tmp_path, repos=(repo,))
    text = store.dumps(snap)
    assert secret not in text
    assert snap.env["NCCL_DEBUG"] == "WARN"
    assert snap.env["HF_TOKEN"].startswith("<redacted")
    assert snap.env["PIP_EXTRA_INDEX_URL"] == "https://pypi.example/simple"
    assert snap.repos[0].remote == "https://github.com/org/code.git"


def test_repos_files_caches_and_metrics(tmp_path: Path, good_venv: Path) -> None:
    repo = make_git_repo(tmp_path / "code", {"model.py": "x = 1\n"})
    cache = tmp_path / "inductor"
    (cache / "fx").mkdir(parents=True)
    (cache / "fx" / "graph").write_bytes(b"g" * 100)
    snap = snap_of(
        good_venv,
        tmp_path,
        repos=(repo,),
        files=(str(repo / "model.py"),),
        caches=(("inductor", str(cache)),),
        default_caches=False,
        metrics={"tok_s": 21500},
    )
    (r,) = snap.repos
    assert (r.branch, r.dirty, r.untracked, r.diff_sha256) == ("main", False, 0, None)
    assert r.head == git(repo, "rev-parse", "HEAD")
    (f,) = snap.files
    assert f.size == 6 and f.sha256 is not None and len(f.sha256) == 64
    (c,) = snap.caches
    assert (c.kind, c.exists, c.bytes, c.files) == ("inductor", True, 100, 1)
    assert snap.metrics == {"tok_s": 21500}
    # dirty in two different ways gives two different diff hashes
    (repo / "model.py").write_text("x = 2\n")
    first = snap_of(good_venv, tmp_path, repos=(repo,), include_cwd_repo=False).repos[0]
    (repo / "model.py").write_text("x = 3\n")
    (repo / "scratch.txt").write_text("notes")
    second = snap_of(good_venv, tmp_path, repos=(repo,), include_cwd_repo=False).repos[0]
    assert first.dirty and second.dirty and second.untracked == 1
    assert first.diff_sha256 != second.diff_sha256


def test_a_cache_folder_named_again_by_cache_is_one_cache(
    tmp_path: Path, good_venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--cache DIR` naming the inductor cache's folder, through a symlink or spelt with a
    trailing slash, is that cache: recorded once, under its named kind."""
    from envguard import api

    cache = tmp_path / "inductor"
    (cache / "fx").mkdir(parents=True)
    (cache / "fx" / "graph").write_bytes(b"g" * 100)
    (tmp_path / "link").symlink_to(cache)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    monkeypatch.chdir(tmp_path)
    snap = api.snapshot(python=good_venv, caches=["link", f"{cache}/"])
    assert [(c.kind, c.path, c.files) for c in snap.caches if c.kind != "triton"] == [
        ("inductor", str(cache), 1)
    ]


def test_missing_file_and_non_repo_are_usage_errors(tmp_path: Path, good_venv: Path) -> None:
    with pytest.raises(UsageError, match=r"--file .*nope\.py: no such file"):
        snap_of(good_venv, tmp_path, files=("nope.py",))
    (tmp_path / "plain").mkdir()
    with pytest.raises(UsageError, match="not a git work tree"):
        snap_of(good_venv, tmp_path, repos=(tmp_path / "plain",))


def test_snapshot_json_is_deterministic_and_round_trips(tmp_path: Path, good_venv: Path) -> None:
    snap = snap_of(good_venv, tmp_path)
    text = store.dumps(snap)
    data = json.loads(text)
    assert list(data) == sorted(data)
    names = [p["name"] for p in data["packages"]]
    assert names == sorted(names)
    assert store.loads(text, source="x") == snap


def test_a_git_hook_s_variables_do_not_point_git_at_another_repo(
    tmp_path: Path, good_venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """envguard run from a git hook (its pre-commit hook, a CI step) inherits GIT_DIR or
    GIT_INDEX_FILE: `git -C repo` would then read that repository, not the one named."""
    repo = make_git_repo(tmp_path / "code", {"model.py": "x = 1\n"})
    other = make_git_repo(tmp_path / "other", {"b.py": "b = 1\n", "c.py": "c = 2\n"})
    (other / "b.py").write_text("b = 9\n")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    snap = snap_of(good_venv, tmp_path, repos=(repo,), default_caches=False)
    (r,) = snap.repos
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_WORK_TREE")
    monkeypatch.delenv("GIT_INDEX_FILE")
    assert r.head == git(repo, "rev-parse", "HEAD") != git(other, "rev-parse", "HEAD")
    assert r.dirty is False
