"""`envguard restore`: everything a snapshot knows, put back in order, each item verified.

Order: packages (a rebuild), repos (opt-in), tracked files, compile caches, the variables
file. Each item is planned from what the live side holds now (measured once, the way diff
measures it, confinement included), and with ``execute`` done through a Target (this host
or the far side of --via), where every write is staged, hashed and renamed into place.
A failed item is left as it was and said; the others go on; the report says all.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from envguard.confine import OUTSIDE
from envguard.errors import ActionError, EnvguardError
from envguard.recovery.outcome import Item
from envguard.redact import REDACTED

if TYPE_CHECKING:
    from envguard.probe.channel import Target
    from envguard.snapshots.blobs import Blobs
    from envguard.snapshots.models import Cache, FileDigest, Repo, Snapshot

# Loader and search-path variables from an untrusted snapshot would run its code in every
# process of the shell that sources the file: written commented out, for a person to read.
REVIEW = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH"})
# Where a venv is, not what it is: never restored.
_SKIP = frozenset({"VIRTUAL_ENV"})


def env_file_text(snap: Snapshot, live_env: dict[str, str]) -> tuple[str, list[str]]:
    """The variables file (export/unset lines, values shell-quoted, names checked) and the
    names left out because their values were redacted."""
    lines = [f"# envguard restore: the environment variables of snapshot {_safe(snap.name)}"]
    lines.append("# source it in the shell that runs training: . FILE")
    left_out = []
    for name, value in sorted(snap.env.items()):
        if name in _SKIP or not name.isidentifier() or not name.isascii():
            continue
        if REDACTED[:-1] in value:  # a secret, or a value with a token in it
            left_out.append(name)
            lines.append(f"# {name}: redacted in the snapshot; set it yourself")
            continue
        line = f"export {name}={shlex.quote(value)}"
        lines.append(f"# review, then uncomment: {line}" if name in REVIEW else line)
    for name in sorted(set(live_env) - set(snap.env) - _SKIP):
        if name.isidentifier() and name.isascii():
            lines.append(f"unset {name}")
    return "\n".join(lines) + "\n", left_out


def _safe(text: str) -> str:
    return "".join(c if c.isprintable() and c not in "\r\n" else "?" for c in text)


def run_env(snap: Snapshot) -> dict[str, str]:
    """The variables a --then command gets from the snapshot (the file's export lines)."""
    return {
        n: v
        for n, v in snap.env.items()
        if n not in _SKIP and n not in REVIEW and n.isidentifier() and REDACTED[:-1] not in v
    }


@dataclass
class Context:
    """What every item step needs."""

    snap: Snapshot
    live: Snapshot
    target: Target
    blobs: Blobs
    execute: bool
    stamp: str = field(
        default_factory=lambda: (
            datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        )
    )
    status: Callable[[str], None] = lambda _: None


def _digest_text(answer: dict[str, object]) -> str:
    return f"sha256 {answer['sha256']}, md5 {answer['md5']}"


def restore_files(ctx: Context) -> list[Item]:
    """Each tracked file whose content differs: written from the store, or from git at the
    recorded HEAD when the hash matches; the displaced version kept beside it."""
    live = {f.path: f for f in ctx.live.files}
    items = []
    for recorded in ctx.snap.files:
        if recorded.sha256 is None:
            continue
        now = live.get(recorded.path)
        dest = (now.read_from or now.path) if now is not None else recorded.path
        name = recorded.rel or recorded.path
        if now is not None and now.sha256 == recorded.sha256:
            items.append(Item(kind="file", name=name, status="already", detail=f"same ({dest})"))
            continue
        if now is not None and now.error and now.error.startswith(OUTSIDE):
            items.append(
                Item(kind="file", name=name, status="refused", detail=f"{dest}: {now.error}")
            )
            continue
        items.append(_restore_file(ctx, recorded, dest, name))
    return items


def _restore_file(ctx: Context, recorded: FileDigest, dest: str, name: str) -> Item:
    assert recorded.sha256 is not None
    found = ctx.blobs.verified(recorded.sha256)
    repo = _git_source(ctx, recorded)
    if isinstance(found, str) and repo is None:
        return Item(
            kind="file",
            name=name,
            status="failed",
            detail=f"{dest}: its content is {found}, and no recorded commit holds it"
            " (snapshot --keep-files keeps it)",
        )
    source = "the store" if not isinstance(found, str) else f"git {repo[1][:12]}"  # type: ignore[index]
    if not ctx.execute:
        return Item(kind="file", name=name, status="planned", detail=f"write {dest} from {source}")
    ctx.status(f"restoring {dest}")
    try:
        if not isinstance(found, str):
            staged = ctx.target.send(found, dest)
        else:
            assert repo is not None and recorded.rel is not None
            answer = ctx.target.call(
                "file_from_git",
                repo=repo[0],
                head=repo[1],
                rel=recorded.rel,
                dest=dest,
                sha256=recorded.sha256,
            )
            if not answer.get("ok"):
                raise ActionError(str(answer.get("error")))
            staged = str(answer["path"])
        answer = ctx.target.call(
            "install_file", staged=staged, dest=dest, sha256=recorded.sha256, stamp=ctx.stamp
        )
    except EnvguardError as exc:
        return Item(kind="file", name=name, status="failed", detail=exc.message)
    if not answer.get("ok"):
        return Item(kind="file", name=name, status="failed", detail=str(answer.get("error")))
    return Item(
        kind="file",
        name=name,
        status="restored",
        detail=f"{dest} from {source}",
        verified=_digest_text(answer),
        kept=answer.get("displaced"),
    )


def _git_source(ctx: Context, recorded: FileDigest) -> tuple[str, str] | None:
    """(the live work tree, the recorded HEAD) that can supply ``recorded`` from git."""
    if recorded.root is None or recorded.rel is None:
        return None
    head = next((r.head for r in ctx.snap.repos if r.path == recorded.root and r.head), None)
    live = {f.path: f for f in ctx.live.files}.get(recorded.path)
    if head is None or live is None:
        return None
    where = live.read_from or live.path
    top = where[: -len(recorded.rel)].rstrip("/") if where.endswith(recorded.rel) else None
    return (top, head) if top else None


def _stack(snap: Snapshot) -> dict[str, str | None]:
    """What an inductor or triton cache is only valid for."""
    torch = snap.torch
    packages = snap.package_map()
    triton = packages.get("triton") or packages.get("pytorch-triton")
    return {
        "Python": snap.interpreter.version,
        "torch": torch.version if torch else None,
        "CUDA": torch.cuda if torch else None,
        "HIP": torch.hip if torch else None,
        "triton": triton.version if triton else (torch.triton if torch else None),
        "GPU": ", ".join(sorted(set(snap.accelerator.gpus))) or None,
        "driver": snap.accelerator.driver,
    }


# What a rebuild of the packages does not change.
_MACHINE = ("GPU", "driver")


def stack_difference(snap: Snapshot, live: Snapshot, *, machine_only: bool = False) -> str | None:
    """The first field of the compile stack that differs, said plainly; None when equal
    (``machine_only``: the GPU and driver, while the packages are still to be rebuilt)."""
    want, have = _stack(snap), _stack(live)
    for key, value in want.items():
        if machine_only and key not in _MACHINE:
            continue
        if have[key] != value:
            return f"{key} is {have[key] or 'absent'} here, {value or 'absent'} in the snapshot"
    return None


def restore_caches(ctx: Context, stack_live: Snapshot, *, rebuild_pending: bool) -> list[Item]:
    """Each kept compile cache put back (extracted beside, renamed in), only on the exact
    stack it was compiled for (in a plan whose packages are still to be rebuilt: the GPU
    and driver now, the rest once they are)."""
    live = {(c.kind, c.path): c for c in ctx.live.caches}
    items = []
    for cache in ctx.snap.caches:
        if cache.archive is None:
            continue
        now = live.get((cache.kind, cache.path))
        items.append(_restore_cache(ctx, cache, now, stack_live, rebuild_pending))
    return items


def _restore_cache(
    ctx: Context, cache: Cache, now: Cache | None, stack_live: Snapshot, rebuild_pending: bool
) -> Item:
    archive = cache.archive
    assert archive is not None
    name = f"{cache.kind} cache"
    if now is not None and now.error and now.error.startswith(OUTSIDE):
        return Item(kind="cache", name=name, status="refused", detail=f"{cache.path}: {now.error}")
    differs = stack_difference(ctx.snap, stack_live, machine_only=rebuild_pending)
    if differs is not None:
        return Item(
            kind="cache",
            name=name,
            status="refused",
            detail=f"{cache.path}: compiled for another stack ({differs})",
        )
    if now is not None and now.exists and (now.files, now.bytes) == (archive.files, archive.bytes):
        return Item(
            kind="cache",
            name=name,
            status="already",
            detail=f"{cache.path}: {archive.files} files, {archive.bytes} bytes, as kept",
        )
    found = ctx.blobs.path(archive.sha256)
    if not found.is_file():  # its hash is checked as it is unpacked: one read of it
        return Item(
            kind="cache",
            name=name,
            status="failed",
            detail=f"its archive is not in the store {ctx.blobs.root}",
        )
    if not ctx.execute:
        return Item(
            kind="cache",
            name=name,
            status="planned",
            detail=f"unpack {archive.files} files into {cache.path}"
            + (" once the packages match (the stack is checked then)" if rebuild_pending else ""),
        )
    ctx.status(f"restoring {cache.path}")
    try:
        # This host unpacks straight from the store; the far side gets a staged copy.
        staged = ctx.target.send(found, cache.path) if ctx.target.remote else str(found)
        answer = ctx.target.call(
            "extract",
            staged=staged,
            dest=cache.path,
            sha256=archive.sha256,
            files=archive.files,
            bytes=archive.bytes,
            stamp=ctx.stamp,
        )
    except EnvguardError as exc:
        return Item(kind="cache", name=name, status="failed", detail=exc.message)
    if not answer.get("ok"):
        return Item(kind="cache", name=name, status="failed", detail=str(answer.get("error")))
    return Item(
        kind="cache",
        name=name,
        status="restored",
        detail=f"{cache.path}: {answer['files']} files, {answer['bytes']} bytes",
        verified=f"archive sha256 {archive.sha256[:16]}..., file count and bytes",
        kept=answer.get("displaced"),
    )


def restore_repos(ctx: Context, *, root: str | None) -> list[Item]:
    """Each recorded repo back at its recorded HEAD: everything (untracked too) stashed
    first, the stash named; refused when the commit is not there."""
    live = {r.path: r for r in ctx.live.repos}
    # A repo recorded only because an editable install lives in it (envguard's own
    # checkout, a library being hacked on) is not the training code: left alone, unless a
    # tracked file lies in it.
    editable = [p.source.path for p in ctx.snap.packages if p.source.kind == "editable"]
    tracked = {f.root for f in ctx.snap.files}
    items = []
    for recorded in ctx.snap.repos:
        if not recorded.head:
            continue
        head = recorded.path.rstrip("/") + "/"
        holds_editable = any(e and (e + "/").startswith(head) for e in editable)
        if holds_editable and recorded.path not in tracked:
            items.append(
                Item(
                    kind="repo",
                    name=recorded.path,
                    status="skipped",
                    detail="the checkout of an editable install, no tracked file in it:"
                    f" left as it is (git -C {shlex.quote(recorded.path)} checkout"
                    f" {recorded.head[:12]} restores it)",
                )
            )
            continue
        path = root if root is not None and len(ctx.snap.repos) == 1 else recorded.path
        items.append(_restore_repo(ctx, recorded, live.get(recorded.path), path))
    return items


def _restore_repo(ctx: Context, recorded: Repo, now: Repo | None, path: str) -> Item:
    head = recorded.head
    assert head is not None
    if now is not None and now.error:
        return Item(kind="repo", name=path, status="refused", detail=now.error)
    if now is not None and now.head == head and not now.dirty and not now.untracked:
        return Item(kind="repo", name=path, status="already", detail=f"at {head[:12]}, clean")
    git = ["git", "-c", "core.hooksPath=/dev/null", "-C", path]

    def run(*argv: str) -> dict[str, object]:
        return ctx.target.call("run", argv=[*git, *argv], set={"GIT_TERMINAL_PROMPT": "0"})

    known = run("cat-file", "-e", f"{head}^{{commit}}")
    if not known.get("ok") or known.get("code") != 0:
        return Item(
            kind="repo",
            name=path,
            status="refused",
            detail=f"commit {head[:12]} is not in {path} (git fetch it first)",
        )
    if not ctx.execute:
        return Item(
            kind="repo",
            name=path,
            status="planned",
            detail=f"stash all changes (untracked too), check out {head[:12]}",
        )
    kept = None
    if now is None or now.dirty or now.untracked:
        message = f"envguard restore {ctx.snap.name} {ctx.stamp}"
        stashed = run("stash", "push", "--include-untracked", "-m", message)
        if stashed.get("code") != 0:
            return Item(kind="repo", name=path, status="failed", detail=_tail(stashed))
        if "No local changes" not in _tail(stashed):
            kept = f"git -C {shlex.quote(path)} stash list | grep {shlex.quote(ctx.stamp)}"
            listed = run("stash", "list", "--format=%gd %s")
            for line in listed.get("tail", []):  # type: ignore[attr-defined]
                if ctx.stamp in line:
                    kept = f"{line.split(' ', 1)[0]} in {path} (git stash pop to get it back)"
    checked = run("checkout", "--quiet", "--detach", head)
    if checked.get("code") != 0:
        return Item(kind="repo", name=path, status="failed", detail=_tail(checked), kept=kept)
    return Item(
        kind="repo",
        name=path,
        status="restored",
        detail=f"checked out {head[:12]} (detached)",
        verified="HEAD is the recorded commit",
        kept=kept,
    )


def _tail(answer: dict[str, object]) -> str:
    lines = answer.get("tail") or [answer.get("error") or "no output"]
    return str(lines[-1])[:200]  # type: ignore[index]


def write_env_file(ctx: Context, path: str) -> Item:
    """The variables file, written through the target like any restored file."""
    import hashlib

    text, left_out = env_file_text(ctx.snap, ctx.live.env)
    detail = f"{path}: source it ('. {shlex.quote(path)}')" + (
        f"; redacted, not written: {', '.join(left_out)}" if left_out else ""
    )
    if not ctx.execute:
        return Item(kind="env", name="variables", status="planned", detail=f"write {detail}")
    data = text.encode()
    try:
        staged = ctx.target.send_bytes(data, path)
        answer = ctx.target.call(
            "install_file",
            staged=staged,
            dest=path,
            sha256=hashlib.sha256(data).hexdigest(),
            stamp=ctx.stamp,
        )
    except EnvguardError as exc:
        return Item(kind="env", name="variables", status="failed", detail=exc.message)
    if not answer.get("ok"):
        return Item(kind="env", name="variables", status="failed", detail=str(answer["error"]))
    return Item(
        kind="env",
        name="variables",
        status="restored",
        detail=detail,
        verified=_digest_text(answer),
        kept=answer.get("displaced"),
    )
