"""The probe's repo record: the same answers as asking git one question at a time (the
probe's way before it asked them together), in fewer git processes, none left behind."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envguard.confine import DIFF_ARGS, SAFE_GIT_ENV, git_env, run_git
from envguard.probe.payload import local_package
from envguard.redact import redact_url
from factories import git, make_git_repo

gitrepos = local_package().gitrepos


def _ask(repo: str, *args: str, env: dict[str, str] | None = None) -> str | None:
    proc = run_git(repo, *args, env=env or SAFE_GIT_ENV, stderr=subprocess.DEVNULL)
    return proc.stdout.decode("utf-8", "surrogateescape") if proc.returncode == 0 else None


def one_at_a_time(path: str) -> dict[str, Any]:
    """The record as the probe built it before, one git process per question (the oracle)."""
    top = (_ask(path, "rev-parse", "--show-toplevel") or "").removesuffix("\n")
    assert top, "not a work tree"
    safe = git_env(top)
    where = (_ask(top, "rev-parse", "--git-path", "index", env=safe) or "").removesuffix("\n")
    index = where if os.path.isabs(where) else os.path.join(top, where)
    copy = Path(top).parent / "oracle-index"
    copy.write_bytes(Path(index).read_bytes())  # git must not refresh the real one
    os.utime(copy, ns=(os.stat(index).st_atime_ns, os.stat(index).st_mtime_ns))
    safe["GIT_INDEX_FILE"] = str(copy)
    try:
        head = (_ask(top, "rev-parse", "--verify", "-q", "HEAD", env=safe) or "").strip() or None
        branch = (_ask(top, "symbolic-ref", "--short", "-q", "HEAD", env=safe) or "").strip()
        diff = _ask(top, "diff", *DIFF_ARGS, "HEAD", "--", env=safe) or ""
        diff = diff.rstrip("\n") if head else ""
        status = _ask(top, "status", "--porcelain", "-uno", env=safe) or ""
        others = _ask(top, "ls-files", "--others", "--exclude-standard", "-z", env=safe) or ""
        remotes = (_ask(top, "remote", env=safe) or "").split()
    finally:
        copy.unlink()
    remote = None
    if remotes:
        name = "origin" if "origin" in remotes else remotes[0]
        url = (_ask(top, "remote", "get-url", name, env=safe) or "").strip()
        remote = redact_url(url) if url else None
    dirty = bool(diff) or bool(status.strip())
    return {
        "path": top,
        "head": head,
        "branch": branch or None,
        "dirty": dirty,
        "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if dirty else None,
        "untracked": len([p for p in others.split("\0") if p]),
        "remote": remote,
        "error": None,
    }


def _clean(repo: Path) -> None:
    """Nothing changed after the commit."""


def _tracked_edit(repo: Path) -> None:
    (repo / "train.py").write_text("print('changed')\n")
    (repo / "notes.txt").write_text("new\n")
    (repo / "data" / "x.csv").parent.mkdir()
    (repo / "data" / "x.csv").write_text("1\n")
    (repo / "data" / "sub").mkdir()
    (repo / "data" / "sub" / "y.csv").write_text("2\n")
    (repo / ".gitignore").write_text("*.log\nbuild/\n")
    (repo / "run.log").write_text("ignored\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_text("ignored\n")


def _staged_only(repo: Path) -> None:
    (repo / "new.py").write_text("x = 1\n")
    git(repo, "add", "new.py")


def _renamed(repo: Path) -> None:
    git(repo, "mv", "train.py", "fit.py")


def _deleted(repo: Path) -> None:
    (repo / "train.py").unlink()


def _unborn(repo: Path) -> None:
    git(repo, "checkout", "-q", "--orphan", "fresh")
    git(repo, "rm", "-q", "--cached", "train.py")
    (repo / "staged.py").write_text("y = 2\n")
    git(repo, "add", "staged.py")


def _detached(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")


def _branch_and_tag_alike(repo: Path) -> None:
    git(repo, "tag", "main")  # symbolic-ref --short then says heads/main


def _remotes(repo: Path) -> None:
    git(repo, "remote", "add", "zeta", "https://zeta.example/z.git")
    git(repo, "remote", "add", "origin", "https://user:secret@example.com/o/r.git")
    git(repo, "config", "--add", "remote.origin.url", "https://second.example/r.git")
    git(repo, "config", "remote.origin.pushurl", "ssh://push.example/r.git")


def _remote_rewritten(repo: Path) -> None:
    git(repo, "remote", "add", "upstream", "gh:o/r.git")
    git(repo, "config", "url.https://github.com/.insteadOf", "gh:")
    git(repo, "config", "remote.bare.fetch", "+refs/heads/*:refs/remotes/bare/*")


def _remote_rewrites(repo: Path) -> None:
    """The longest insteadOf that starts the URL wins; pushInsteadOf is for pushes only."""
    git(repo, "remote", "add", "origin", "gh:o/r.git")
    git(repo, "config", "--add", "url.https://short.example/.insteadOf", "g")
    git(repo, "config", "--add", "url.https://github.com/.insteadOf", "gh:")
    git(repo, "config", "--add", "url.https://other.example/.insteadOf", "gh")
    git(repo, "config", "url.ssh://push.example/.pushInsteadOf", "gh:")


def _remote_rewrite_of_everything(repo: Path) -> None:
    git(repo, "remote", "add", "origin", "o/r.git")
    git(repo, "config", "url.https://mirror.example/.insteadOf", "")


def _remote_without_a_url_first(repo: Path) -> None:
    """A remote with no URL sorts first and there is no origin: git takes its name."""
    git(repo, "config", "remote.aaa.fetch", "+refs/heads/*:refs/remotes/aaa/*")
    git(repo, "remote", "add", "zed", "https://zed.example/z.git")


def _remote_named_with_dots(repo: Path) -> None:
    git(repo, "remote", "add", "my.fork", "https://fork.example/f.git")
    git(repo, "config", "remote./odd.url", "https://skipped.example/x.git")  # git skips it


def _remote_flag_without_a_value(repo: Path) -> None:
    """A valueless boolean git accepts: `git remote -v` reads the config as ever."""
    git(repo, "remote", "add", "origin", "https://example.com/o.git")
    with (repo / ".git" / "config").open("a") as fh:
        fh.write('[remote "origin"]\n\tprune\n[branch "main"]\n\trebase\n')


def _remote_url_without_a_value(repo: Path) -> None:
    """A key git refuses without a value: `git remote` fails, and no remote is recorded."""
    git(repo, "remote", "add", "origin", "https://example.com/o.git")
    with (repo / ".git" / "config").open("a") as fh:
        fh.write('[remote "other"]\n\turl\n')


def _remote_url_emptied(repo: Path) -> None:
    """An empty URL: git 2.46 and later clear the URLs named before it with one."""
    git(repo, "remote", "add", "origin", "https://upstream.example/r.git")
    with (repo / ".git" / "config").open("a") as fh:
        fh.write('[remote "origin"]\n\turl =\n\turl = https://mine.example/r.git\n')


def _remote_with_a_bad_boolean(repo: Path) -> None:
    """A value git cannot read as a boolean: `git remote` fails."""
    git(repo, "remote", "add", "origin", "https://example.com/o.git")
    git(repo, "config", "remote.origin.prune", "maybe")


def _remote_with_plain_booleans(repo: Path) -> None:
    git(repo, "remote", "add", "origin", "https://example.com/o.git")
    git(repo, "config", "remote.origin.prune", "On")
    git(repo, "config", "remote.origin.mirror", "0")


def _branch_section_without_a_name(repo: Path) -> None:
    git(repo, "remote", "add", "origin", "https://example.com/o.git")
    with (repo / ".git" / "config").open("a") as fh:
        fh.write('[branch ""]\n\trebase = true\n')


def _unborn_beside_a_file_named_head(repo: Path) -> None:
    _unborn(repo)
    (repo / "HEAD").write_text("not a ref\n")


def _remote_with_a_line_break(repo: Path) -> None:
    git(repo, "config", "remote.origin.url", "https://a.example/x (fetch)\norigin\tevil")


def _nested_repo_and_submodule(repo: Path) -> None:
    inner = make_git_repo(repo.parent / "inner", {"s.txt": "s\n"})
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(inner), "sm")
    git(repo, "commit", "-qm", "sm")
    (repo / "sm" / "untracked-inside").write_text("u\n")  # not dirty for status -uno
    nested = repo / "nested"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "z").write_text("z\n")


def _filter_driver(repo: Path) -> None:
    (repo / ".gitattributes").write_text("*.py filter=lfsish\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-qm", "attrs")
    git(repo, "config", "filter.lfsish.clean", "false")  # would fail status if it ran
    (repo / "train.py").write_text("print('filtered?')\n")


STATES: dict[str, Callable[[Path], None]] = {
    "clean": _clean,
    "tracked_edit_and_untracked": _tracked_edit,
    "staged_only": _staged_only,
    "renamed": _renamed,
    "deleted": _deleted,
    "unborn_head": _unborn,
    "detached": _detached,
    "branch_and_tag_alike": _branch_and_tag_alike,
    "remotes": _remotes,
    "remote_rewritten": _remote_rewritten,
    "remote_with_a_line_break": _remote_with_a_line_break,
    "remote_rewrites": _remote_rewrites,
    "remote_rewrite_of_everything": _remote_rewrite_of_everything,
    "remote_without_a_url_first": _remote_without_a_url_first,
    "remote_named_with_dots": _remote_named_with_dots,
    "remote_flag_without_a_value": _remote_flag_without_a_value,
    "remote_url_without_a_value": _remote_url_without_a_value,
    "unborn_beside_a_file_named_head": _unborn_beside_a_file_named_head,
    "remote_url_emptied": _remote_url_emptied,
    "remote_with_a_bad_boolean": _remote_with_a_bad_boolean,
    "remote_with_plain_booleans": _remote_with_plain_booleans,
    "branch_section_without_a_name": _branch_section_without_a_name,
    "head_ambiguous": lambda repo: git(repo, "update-ref", "refs/tags/HEAD", "HEAD"),
    "nested_repo_and_submodule": _nested_repo_and_submodule,
    "filter_driver": _filter_driver,
}


@pytest.fixture
def git_env_isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repo's own config only, and a temp folder of the test's own."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    return scratch


@pytest.mark.parametrize("state", sorted(STATES))
def test_the_record_is_what_one_question_at_a_time_answers(
    state: str, tmp_path: Path, git_env_isolated: Path
) -> None:
    repo = make_git_repo(tmp_path / "proj" / "repo", {"train.py": "print('train')\n"})
    STATES[state](repo)
    expected = one_at_a_time(str(repo))
    index = repo / ".git" / "index"
    before = index.stat() if index.exists() else None
    assert gitrepos.git_repo(str(repo)) == expected
    if before is not None:  # reading a repo never writes its index
        after = index.stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert list(git_env_isolated.iterdir()) == [], "the index copy was left behind"


def test_a_linked_work_tree_and_a_path_through_a_symlink(
    tmp_path: Path, git_env_isolated: Path
) -> None:
    """`git worktree add`: its index lives in the main repo's .git/worktrees/NAME."""
    repo = make_git_repo(tmp_path / "repo")
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(linked))
    (linked / "train.py").write_text("print('side')\n")
    (linked / "extra.txt").write_text("u\n")
    expected = one_at_a_time(str(linked))
    assert expected["branch"] == "side" and expected["dirty"]
    index = repo / ".git" / "worktrees" / "linked" / "index"
    before = index.stat()
    assert gitrepos.git_repo(str(linked)) == expected
    (tmp_path / "via").symlink_to(linked / ".", target_is_directory=True)
    assert gitrepos.git_repo(str(tmp_path / "via")) == expected
    assert index.stat().st_mtime_ns == before.st_mtime_ns
    assert list(git_env_isolated.iterdir()) == []


def test_a_line_break_in_the_path_and_an_ambiguous_head(
    tmp_path: Path, git_env_isolated: Path
) -> None:
    """With HEAD ambiguous (a tag named HEAD), `rev-parse --abbrev-ref` prints no branch:
    a line break in the work tree's path must not stand in for the missing line, or the
    record would be the repo's above it, whose filter would run."""
    outer = make_git_repo(tmp_path / "a", {"x": "d\n", ".gitattributes": "x filter=evil\n"})
    mark = tmp_path / "MARK"
    git(outer, "config", "filter.evil.clean", f"touch {mark}; cat")
    (outer / "x").write_text("changed\n")
    inner = make_git_repo(tmp_path / "a\nb" / "r", {"train.py": "x\n"})
    git(inner, "update-ref", "refs/tags/HEAD", "HEAD")  # (newer gits refuse `git tag HEAD`)
    expected = one_at_a_time(str(inner))
    assert expected["path"] == str(inner) and expected["branch"] == "main"
    assert gitrepos.git_repo(str(inner)) == expected
    assert not mark.exists()


@pytest.mark.parametrize(
    "value", ["maybe", "\u0663", "--5", "0x10", "1e3", " true", "TRUE", "-1", "09", "010", "0"]
)
def test_a_remote_boolean_is_read_as_git_reads_it(
    value: str, tmp_path: Path, git_env_isolated: Path
) -> None:
    """A value git cannot read as a boolean makes `git remote` fail (no remote recorded)."""
    repo = make_git_repo(tmp_path / "repo")
    git(repo, "remote", "add", "origin", "https://example.com/o.git")
    git(repo, "config", "remote.origin.prune", value)
    assert gitrepos.git_repo(str(repo)) == one_at_a_time(str(repo))


@pytest.mark.parametrize(
    "refspec",
    [
        "+refs/heads/main:refs/remotes/origin/main",
        "+refs/pull/*/head:refs/remotes/origin/pr/*",
        "refs/heads/*:refs/remotes/o",
        "x y:refs/remotes/o/x",
        "a:b:c",
        "refs/heads/x.:refs/remotes/o/x.",
        "^refs/heads/skip",
    ],
)
def test_a_fetch_refspec_is_read_as_git_reads_it(
    refspec: str, tmp_path: Path, git_env_isolated: Path
) -> None:
    """git refuses a malformed fetch refspec, and `git remote` then fails."""
    repo = make_git_repo(tmp_path / "repo")
    git(repo, "remote", "add", "origin", "https://example.com/o.git")
    git(repo, "config", "--add", "remote.origin.fetch", refspec)
    assert gitrepos.git_repo(str(repo)) == one_at_a_time(str(repo))


def test_a_rewrite_without_a_base_is_not_one(tmp_path: Path, git_env_isolated: Path) -> None:
    repo = make_git_repo(tmp_path / "repo")
    git(repo, "remote", "add", "origin", "https://example.com/o.git")
    with (repo / ".git" / "config").open("a") as fh:
        fh.write("[url]\n\tinsteadOf = https://\n")
    expected = one_at_a_time(str(repo))
    assert expected["remote"] == "https://example.com/o.git"
    assert gitrepos.git_repo(str(repo)) == expected


def _filtered_repo(folder: Path, mark: Path) -> Path:
    """A work tree whose edited file runs the config's clean filter, if git is let run it."""
    repo = make_git_repo(folder, {"x": "d\n", ".gitattributes": "* filter=evil\n"})
    git(repo, "config", "filter.evil.clean", f"touch {mark}; cat")
    (repo / "x").write_text("changed\n")
    return repo


def test_a_work_tree_whose_name_ends_in_a_space(tmp_path: Path, git_env_isolated: Path) -> None:
    """Its top is read as git prints it: stripped, it named the repo beside it, whose
    filter then ran under the named repo's settings."""
    mark = tmp_path / "MARK"
    _filtered_repo(tmp_path / "proj", mark)
    named = make_git_repo(tmp_path / "proj ", {"train.py": "x\n"})
    record = gitrepos.git_repo(str(named))
    assert record == one_at_a_time(str(named))
    assert record["path"] == str(named) and not record["dirty"]
    assert not mark.exists()


def test_a_core_worktree_inside_another_repo(tmp_path: Path, git_env_isolated: Path) -> None:
    """Where the named repo's config sends its work tree into another repo's, git at that
    top finds the other one: what status and diff read there is asked there too, its
    filters switched off."""
    mark = tmp_path / "MARK"
    outer = _filtered_repo(tmp_path / "P", mark)
    (outer / "B").mkdir()
    named = make_git_repo(tmp_path / "A")
    git(named, "config", "core.worktree", str(outer / "B"))
    record = gitrepos.git_repo(str(named))
    assert record == one_at_a_time(str(named))
    assert not mark.exists()


def test_a_subfolder_names_its_work_tree(tmp_path: Path, git_env_isolated: Path) -> None:
    repo = make_git_repo(tmp_path / "repo", {"pkg/mod.py": "x = 1\n", "top.txt": "t\n"})
    (repo / "top.txt").write_text("changed\n")
    (repo / "loose.txt").write_text("u\n")
    record = gitrepos.git_repo(str(repo / "pkg"))
    assert record == one_at_a_time(str(repo))
    assert record["untracked"] == 1 and record["dirty"]


def _logging_git(tmp_path: Path, *, refuse: str | None = None) -> Path:
    """A `git` first on PATH that logs each run (its pid and arguments) and then runs the
    real one; with ``refuse``, fails any run whose arguments hold that word (an old git)."""
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True)
    folder = tmp_path / "bin"
    folder.mkdir()
    log = tmp_path / "git.log"
    check = f'case "$*" in *{refuse}*) exit 129;; esac\n' if refuse else ""
    (folder / "git").write_text(
        f'#!/bin/sh\necho "$$ $*" >> {log}\n{check}exec {real.stdout.strip()} "$@"\n'
    )
    (folder / "git").chmod(stat.S_IRWXU)
    return log


def test_fewer_git_processes_same_answers(
    tmp_path: Path, git_env_isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten git processes one after another were most of a snapshot's probe in a repo, and
    each one it starts beside the check's shares costs a CUDA torch snapshot about 1.5 ms:
    the branch comes with the work tree's top, the remote from the config query that names
    the filters, then the status and the diff together."""
    repo = make_git_repo(tmp_path / "repo")
    _remotes(repo)
    git(repo, "config", "url.https://mirror.example/.insteadOf", "https://user:secret@example.com/")
    _tracked_edit(repo)
    expected = one_at_a_time(str(repo))
    assert expected["remote"] == "https://mirror.example/o/r.git"
    log = _logging_git(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert gitrepos.git_repo(str(repo)) == expected
    runs = log.read_text().splitlines()
    asked = [run.split(" ", 4)[3] for run in runs]  # (PID -C REPO COMMAND ARGUMENTS)
    assert sorted(asked) == ["config", "diff", "rev-parse", "status"], runs


def test_a_git_without_porcelain_v2_gets_the_same_record(
    tmp_path: Path, git_env_isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git before 2.11 has no `status --porcelain=v2`: each question is asked on its own."""
    repo = make_git_repo(tmp_path / "repo")
    _tracked_edit(repo)
    _remotes(repo)
    expected = one_at_a_time(str(repo))
    log = _logging_git(tmp_path, refuse="porcelain=v2")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert gitrepos.git_repo(str(repo)) == expected
    assert any("ls-files" in run for run in log.read_text().splitlines())
    assert list(git_env_isolated.iterdir()) == []


@pytest.fixture(params=["posix_spawn", "subprocess"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """run_gits both ways: posix_spawn, and subprocess where the platform has none."""
    if request.param == "subprocess":
        monkeypatch.delattr(os, "posix_spawn")
    return str(request.param)


def test_both_ways_of_starting_git_answer_alike(tmp_path: Path, way: str) -> None:
    from envguard.confine import run_gits

    repo = make_git_repo(tmp_path / "repo")
    answers = run_gits(
        str(repo), [("rev-parse", "--show-toplevel"), ("no-such-command",)], env=SAFE_GIT_ENV
    )
    assert answers[0] == (0, f"{repo}\n".encode())
    assert answers[1] is not None and answers[1][0] != 0


def test_a_git_that_never_answers_is_killed_at_the_deadline(tmp_path: Path, way: str) -> None:
    """run_gits kills what runs past its deadline and leaves no process behind."""
    from envguard.confine import run_gits

    folder = tmp_path / "bin"
    folder.mkdir()
    pids = tmp_path / "pids"
    sleep = shutil.which("sleep")
    (folder / "git").write_text(f"#!/bin/sh\necho $$ >> {pids}\nexec {sleep} 30\n")
    (folder / "git").chmod(stat.S_IRWXU)
    env = {**SAFE_GIT_ENV, "PATH": str(folder)}
    answers = run_gits(str(tmp_path), [("status",), ("remote",)], env=env, timeout=0.5)
    assert answers == [None, None]
    for pid in pids.read_text().split():
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid), 0)  # reaped: no such process


def test_no_git_on_path_is_no_answer(tmp_path: Path, way: str) -> None:
    from envguard.confine import run_gits

    env = {**SAFE_GIT_ENV, "PATH": str(tmp_path)}
    assert run_gits(str(tmp_path), [("status",)], env=env) == [None]


def test_scratch_folders_a_killed_probe_left_are_swept_once_old(
    tmp_path: Path, git_env_isolated: Path
) -> None:
    """A probe killed while git ran leaves its index copy; the next probe that copies an
    index removes those of processes gone for an hour, and nothing else: not a live
    process's, not a recent one (its PID may be another namespace's), not an older
    envguard's (no PID in its name), not a file."""
    repo = make_git_repo(tmp_path / "repo", {"train.py": "print('train')\n"})
    gone = subprocess.Popen(["true"])
    gone.wait()
    alive = subprocess.Popen(["sleep", "60"])
    try:
        hour_ago = os.stat(repo).st_mtime - 2 * 3600
        made = {}
        for label, name in [
            ("gone", f"envguard-index-{gone.pid}-aa"),
            ("recent", f"envguard-index-{gone.pid}-bb"),
            ("alive", f"envguard-index-{alive.pid}-cc"),
            ("older envguard", "envguard-index-0exihkld"),
        ]:
            folder = git_env_isolated / name
            folder.mkdir()
            (folder / "index").write_bytes(b"DIRC")
            if label != "recent":
                os.utime(folder, (hour_ago, hour_ago))
            made[label] = folder
        a_file = git_env_isolated / f"envguard-index-{gone.pid}-dd"
        a_file.write_bytes(b"")
        os.utime(a_file, (hour_ago, hour_ago))
        assert gitrepos.git_repo(str(repo))["head"]
        assert not made["gone"].exists()
        assert all(made[label].is_dir() for label in ("recent", "alive", "older envguard"))
        assert a_file.is_file()
        assert sorted(p.name for p in git_env_isolated.iterdir()) == sorted(
            [made["recent"].name, made["alive"].name, made["older envguard"].name, a_file.name]
        ), "the probe's own copy is removed too"
    finally:
        alive.kill()
        alive.wait()
