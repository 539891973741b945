"""Paths a snapshot names are read only under the cwd, its work tree, the target's cache
folders and --allow; git never runs a program a repo's config names."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from factories import make_dist_info, make_venv

runner = CliRunner()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


def _hostile_repo(where: Path, marker: Path) -> Path:
    """A work tree whose config runs a program on `git status` / `git diff` (fsmonitor)."""
    where.mkdir(parents=True)
    _git(where, "init", "-q")
    (where / "f").write_text("a\n")
    _git(where, "add", "f")
    _git(where, "commit", "-qm", "x")
    (where / "f").write_text("b\n")  # dirty: git refreshes the index, asking fsmonitor
    hook = where / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    _git(where, "config", "core.fsmonitor", str(hook))
    return where


@pytest.fixture
def snap(in_tmp: Path, good_venv: Path) -> Path:
    (in_tmp / "train.py").write_text("print('train')\n")
    result = runner.invoke(
        app, ["snapshot", "--python", str(good_venv), "--name", "good", "--file", "train.py"]
    )
    assert result.exit_code == 0, result.stderr
    return in_tmp / "snapshots" / "good.json"


def _forge(snap: Path, elsewhere: Path, marker: Path) -> dict[str, Path]:
    """Add to the snapshot a secret file, a cache and a hostile repo outside the cwd."""
    secret = elsewhere / "secret.txt"
    secret.write_text("hunter2\n")
    cache = elsewhere / "cache"
    cache.mkdir()
    (cache / "blob").write_bytes(b"x" * 100)
    repo = _hostile_repo(elsewhere / "repo", marker)
    data = json.loads(snap.read_text())
    data["files"].append({"path": str(secret), "sha256": "0" * 64, "size": 8})
    data["caches"].append(
        {"kind": "other", "path": str(cache), "exists": True, "bytes": 100, "files": 1}
    )
    data["repos"].append({"path": str(repo), "dirty": True})
    snap.write_text(json.dumps(data))
    return {"files": secret, "caches": cache, "repos": repo}


def _changes(*args: str) -> dict[str, dict[str, str]]:
    result = runner.invoke(app, ["diff", "good", "--format", "json", *args])
    assert result.exit_code in (0, 1), result.stderr
    return {c["name"]: c for c in json.loads(result.stdout)["changes"]}


def test_files_caches_and_repos_outside_are_not_read(
    snap: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    marker = elsewhere / "hook-ran"
    forged = _forge(snap, elsewhere, marker)
    changes = _changes()
    assert not marker.exists(), "git ran a program named by a repo outside the work tree"
    for section, path in forged.items():
        change = changes[str(path)]
        assert change["section"] == section
        assert "not read: outside the working directory" in change["message"], change
        assert "--allow PATH" in change["message"]
    assert changes[str(forged["files"])]["severity"] == "critical"  # the gate still fails


def test_allow_reads_them_and_git_still_runs_no_config_program(
    snap: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    marker = elsewhere / "hook-ran"
    forged = _forge(snap, elsewhere, marker)
    changes = _changes("--allow", str(elsewhere))
    assert "changed" in changes[str(forged["files"])]["message"]  # hashed: it was read
    assert str(forged["caches"]) not in changes  # walked: 100 B, as recorded
    assert "not read" not in changes.get(str(forged["repos"]), {}).get("message", "")
    assert not marker.exists(), "git ran the repo's core.fsmonitor program"


def test_tracked_files_hash_within_one_deadline(tmp_path: Path) -> None:
    from factories import load_target

    target = load_target()
    big = tmp_path / "checkpoint.bin"
    big.write_bytes(b"x" * (3 << 20))
    [done] = target.hash_files([str(big)], target.Roots(None))
    assert done["size"] == 3 << 20 and done["error"] is None
    [cut] = target.hash_files([str(big)], target.Roots(None), seconds=-1)
    assert cut["sha256"] is None and "not hashed: tracked files took over" in cut["error"]
    [outside] = target.hash_files([str(big)], target.Roots([str(tmp_path / "elsewhere")]))
    assert outside["sha256"] is None and outside["error"].startswith("not read: outside")


def _pull_request_with_a_git_directory(origin: Path, snap: Path, marker: Path) -> Path:
    """A pull request that commits a folder which is itself a git directory (HEAD, objects/,
    a config naming a clean filter and core.worktree) and a snapshot naming it as a repo;
    returns the checkout CI would make of it (a fresh clone)."""
    checkout = origin.parent / "checkout"
    origin.mkdir()
    _git(origin, "init", "-q")
    sub = origin / "sub"
    _git(origin, "init", "-q", "--bare", "sub")
    config = str(sub / "config")
    _git(origin, "config", "--file", config, "core.bare", "false")
    _git(origin, "config", "--file", config, "core.worktree", str(checkout / "sub"))
    _git(origin, "config", "--file", config, "filter.evil.clean", f'sh -c "touch {marker}; cat"')
    (sub / "info").mkdir(exist_ok=True)
    (sub / "info" / "attributes").write_text("* filter=evil\n")
    (sub / "refs" / ".keep").write_text("")
    (sub / "payload.txt").write_text("hello\n")
    subprocess.run(
        ["git", "-c", "filter.evil.clean=cat", "-c", f"core.worktree={sub}", "add", "payload.txt"],
        env={"GIT_DIR": str(sub), "GIT_WORK_TREE": str(sub), "PATH": "/usr/bin:/bin"},
        cwd=sub,
        check=True,
        capture_output=True,
    )
    data = json.loads(snap.read_text())
    data["repos"] = [{"path": "sub"}]
    (origin / "snapshots").mkdir()
    (origin / "snapshots" / "pr.json").write_text(json.dumps(data))
    _git(origin, "add", "-A", "-f")
    _git(origin, "commit", "-qm", "pr")
    subprocess.run(["git", "clone", "-q", str(origin), str(checkout)], check=True)
    return checkout


def test_a_git_directory_committed_into_the_checkout_runs_nothing(
    snap: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path_factory.mktemp("pr")
    marker = base / "pwned"
    checkout = _pull_request_with_a_git_directory(base / "origin", snap, marker)
    monkeypatch.chdir(checkout)
    for command in (["check", "snapshots/pr.json"], ["diff", "snapshots/pr.json"]):
        result = runner.invoke(app, command)
        assert not marker.exists(), f"{command}: git ran the repo's clean filter"
        assert result.exit_code in (0, 1), result.stderr
    result = runner.invoke(app, ["snapshot", "--repo", "sub", "--name", "x"])
    assert not marker.exists(), "snapshot --repo: git ran the repo's clean filter"
    assert result.exit_code == 2 and result.stderr.startswith("error: --repo ")
    assert "a git directory, not a work tree: refused" in result.stderr


def test_a_file_named_head_in_a_repo_is_no_traceback(in_tmp: Path, good_venv: Path) -> None:
    repo = in_tmp / "proj"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "HEAD").write_text("not a ref\n")
    _git(repo, "add", "HEAD")
    _git(repo, "commit", "-qm", "x")
    (repo / "HEAD").write_text("changed\n")
    result = runner.invoke(
        app, ["snapshot", "--python", str(good_venv), "--repo", "proj", "--name", "h"]
    )
    assert result.exit_code == 0, result.stderr
    (recorded,) = [
        r
        for r in json.loads((in_tmp / "snapshots" / "h.json").read_text())["repos"]
        if r["path"].endswith("proj")
    ]
    assert recorded["dirty"] is True and recorded["diff_sha256"]


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


def test_every_git_envguard_runs_goes_through_the_one_safe_runner() -> None:
    """A `git` argv anywhere but confine.run_git would run with whatever the repo's config
    names; the mechanism holds only while there is one place."""
    import re

    src = Path(__file__).parents[2] / "src" / "envguard"
    spawn = re.compile(r"""(?:^|\[)\s*["']git["']\s*,""")  # an argv that starts with git
    found = [
        f"{path.relative_to(src)}:{number}"
        for path in sorted(src.rglob("*.py"))
        if path.name != "confine.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if spawn.search(line)
    ]
    assert found == [], "git run outside confine.run_git"


def _sign_head(repo: Path) -> None:
    """Give HEAD a (forged) signature header, as a signed commit has."""
    raw = subprocess.run(["git", "-C", str(repo), "cat-file", "commit", "HEAD"],
                         check=True, capture_output=True, text=True).stdout  # fmt: skip
    head, _, message = raw.partition("\n\n")
    sig = "gpgsig -----BEGIN PGP SIGNATURE-----\n \n x\n -----END PGP SIGNATURE-----"
    signed = subprocess.run(
        ["git", "-C", str(repo), "hash-object", "-t", "commit", "-w", "--stdin"],
        input=f"{head}\n{sig}\n\n{message}", check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    _git(repo, "update-ref", "HEAD", signed)


def test_the_safe_runner_runs_no_filter_hook_or_signature_program(tmp_path: Path) -> None:
    """checkout, stash, log and worktree add, in a repo whose committed .gitattributes
    routes every file to a filter driver (also `required`) and whose config asks log for
    signatures (gpg.program): none of the programs runs, and the commands still work."""
    from envguard.confine import run_git

    marker = tmp_path / "ran"
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitattributes").write_text("* filter=evil.lfs\n")
    (repo / "a.py").write_text("one\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "one")
    (repo / "a.py").write_text("two\n")
    _git(repo, "commit", "-qam", "two")
    _sign_head(repo)  # log --show-signature asks gpg.program only about a signed commit
    for key in ("clean", "smudge", "process"):
        _git(repo, "config", f"filter.evil.lfs.{key}", f'sh -c "echo {key} >> {marker}; cat"')
    _git(repo, "config", "filter.evil.lfs.required", "true")
    _git(repo, "config", "log.showSignature", "true")
    _git(repo, "config", "gpg.program", f'sh -c "echo gpg >> {marker}"')
    (repo / "a.py").write_text("dirty\n")
    for args in (
        ("stash", "push", "-q", "--include-untracked"),
        ("checkout", "-q", "--detach", "HEAD~1"),
        ("log", "-1", "--format=%h %s"),
        ("worktree", "add", "-q", "--detach", str(tmp_path / "w"), "HEAD"),
    ):
        done = run_git(str(repo), *args)
        assert done.returncode == 0, (args, done.stderr)
    assert not marker.exists(), marker.read_text()
    assert (repo / "a.py").read_text() == "one\n"
