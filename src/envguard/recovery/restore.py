"""`envguard restore`: everything a snapshot knows, put back in order, each item verified.

Order: packages (a rebuild), repos (opt-in), tracked files, compile caches, the variables
file. Each item is planned from what the live side holds now (measured once, the way diff
measures it, confinement included), and with ``execute`` done through a Target (this host
or the far side of --via), where every write is staged, hashed and renamed into place.
A failed item is left as it was and said; the others go on; the report says all.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Protocol, TypeVar

from envguard.compare.forecast import forecast, stale
from envguard.compare.sections.caches import DEFAULT_KINDS, one_per_folder
from envguard.compare.sections.env import started
from envguard.confine import OUTSIDE
from envguard.errors import ActionError, EnvguardError
from envguard.recovery.outcome import Item
from envguard.recovery.review import held
from envguard.redact import REDACTED
from envguard.snapshots.signing import UNSIGNED, Trust

if TYPE_CHECKING:
    from envguard.probe.channel import Target
    from envguard.snapshots.blobs import Blobs
    from envguard.snapshots.models import Cache, FileDigest, Repo, Snapshot


class _HasPath(Protocol):
    @property
    def path(self) -> str: ...


_Pathed = TypeVar("_Pathed", bound=_HasPath)


# Where a venv is, not what it is, and the installers' own settings: never restored.
_SKIP = frozenset({"VIRTUAL_ENV"})
_SKIP_PREFIXES = ("UV_", "PIP_")


def _restorable(name: str, value: str | None = None) -> bool:
    """A variable the probe records (its prefixes and names: a forged snapshot's BASH_ENV
    or PROMPT_COMMAND is not one), not skipped, and a value a shell can hold."""
    from envguard.probe.payload import local_package

    env = local_package().env
    if not (name.startswith(env.ENV_PREFIXES) or name in env.ENV_NAMES):
        return False
    if name in _SKIP or name.startswith(_SKIP_PREFIXES) or not name.isidentifier():
        return False
    # No control character: a \r or an escape sequence could hide a line from `cat`.
    return name.isascii() and (value is None or value.isprintable())


def env_file_text(
    snap: Snapshot, live_env: dict[str, str], *, trust: Trust = UNSIGNED
) -> tuple[str, list[str]]:
    """The variables file (export/unset lines, values shell-quoted, names checked) and the
    names left out because their values were redacted. Code-loading variables are held
    (commented out, with the reason) unless ``trust`` says this user's envguard signed it."""
    lines = [f"# envguard restore: the environment variables of snapshot {_safe(snap.name)}"]
    lines.append("# source it in the shell that runs training: . FILE")
    if trust.signed:
        lines.append(f"# {trust.why}: every variable is set as it was recorded")
    else:
        lines.append(f"# {trust.why}: variables that load code are held for review")
    left_out = []
    for name, value in sorted(started(snap).items()):
        if not _restorable(name, value):
            continue
        if REDACTED[:-1] in value:  # a secret, or a value with a token in it
            left_out.append(name)
            lines.append(f"# {name}: redacted in the snapshot; set it yourself")
            continue
        line = f"export {name}={shlex.quote(value)}"
        why = None if trust.signed else held(name)
        if why is not None:
            lines.append(f"# {name}: held for review: {why}")
            line = f"# review, then uncomment: {line}"
        lines.append(line)
    for name in sorted(set(live_env) - set(started(snap))):
        if _restorable(name):
            lines.append(f"unset {name}")
    return "\n".join(lines) + "\n", left_out


def _safe(text: str) -> str:
    return "".join(c if c.isprintable() and c not in "\r\n" else "?" for c in text)


def env_file_name(snap: Snapshot) -> str:
    """The default variables file: NAME.env.sh in the working directory, the name reduced
    to a plain file name (a snapshot's name may hold '/' or '..')."""
    import re

    base = re.sub(r"[^A-Za-z0-9._-]", "_", snap.name).lstrip(".") or "snapshot"
    return f"{base}.env.sh"


def run_env(snap: Snapshot, *, trust: Trust = UNSIGNED) -> dict[str, str]:
    """The variables a --then command or a bisect candidate gets from the snapshot (the
    file's export lines): none that review.held() holds, unless ``trust`` says signed; as
    the measured process started (started())."""
    return {
        n: v
        for n, v in started(snap).items()
        if _restorable(n, v) and (trust.signed or held(n) is None) and REDACTED[:-1] not in v
    }


@dataclass
class Context:
    """What every item step needs."""

    snap: Snapshot
    live: Snapshot
    target: Target
    blobs: Blobs
    execute: bool
    # Where a write may go (probe/target/apply.refused checks it there, at write time).
    confine: dict[str, object] = field(default_factory=dict)
    # Local paths a repo's stash must leave in place (the snapshot's folder, the env file).
    keep_out: list[str] = field(default_factory=list)
    stamp: str = field(
        default_factory=lambda: (
            datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        )
    )
    status: Callable[[str], None] = lambda _: None
    trust: Trust = UNSIGNED  # whether this user's envguard signed the snapshot


def _digests(answer: dict[str, object]) -> dict[str, str]:
    return {
        "verified": "hashed again after the write",
        "sha256": str(answer["sha256"]),
        "md5": str(answer["md5"]),
    }


def _lost_its_kind(recorded: FileDigest, now: FileDigest) -> bool:
    """The same bytes, but executable where the snapshot's was not, or the other way."""
    if recorded.mode is None or now.mode is None:
        return False
    return bool(recorded.mode & 0o111) != bool(now.mode & 0o111)


def restore_files(ctx: Context) -> list[Item]:
    """Each tracked file whose content differs: written from the store, or from git at the
    recorded HEAD when the hash matches; the displaced version kept beside it."""
    live = _by_path(ctx.live.files)
    items = []
    for recorded in ctx.snap.files:
        if recorded.sha256 is None:
            continue
        now = live.get(_key(recorded.path))
        if now is None:  # the live side did not measure it: never written blind
            name = _label(ctx, recorded.path)
            items.append(Item(kind="file", name=name, status="refused", detail=_UNMEASURED))
            continue
        dest = now.read_from or now.path
        name = _label(ctx, dest)  # what is written, never what the snapshot calls it
        if now.sha256 == recorded.sha256 and not _lost_its_kind(recorded, now):
            items.append(Item(kind="file", name=name, status="already", detail=f"same ({dest})"))
            continue
        if now.error and now.error.startswith(OUTSIDE):
            detail = f"{dest}: {NOT_WRITTEN}"
            items.append(Item(kind="file", name=name, status="refused", detail=detail))
            continue
        items.append(_restore_file(ctx, recorded, dest, name))
    return items


_UNMEASURED = "not measured where it would be written (the path is not a plain one)"
NOT_WRITTEN = (
    "not written: outside the working directory, its work tree and the cache folders"
    " (--allow PATH lets restore write there)"
)


def _label(ctx: Context, path: str) -> str:
    """A row's name: the path written, relative to the working directory when inside it."""
    cwd = ctx.confine.get("cwd")
    if isinstance(cwd, str) and _key(path).startswith(_key(cwd) + os.sep):
        return os.path.relpath(_key(path), _key(cwd))
    return path


def _key(path: str) -> str:
    """A path as the probe reports it (absolute, normalised): the live side's key."""
    return os.path.normpath(os.path.abspath(os.path.expanduser(path)))


def _by_path(entries: Iterable[_Pathed]) -> dict[str, _Pathed]:
    return {_key(e.path): e for e in entries}


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
    staged: str | None = None
    try:
        if not isinstance(found, str):
            staged = ctx.target.send(found, dest, confine=ctx.confine)
        else:
            assert repo is not None and recorded.rel is not None
            answer = ctx.target.call(
                "file_from_git",
                repo=repo[0],
                head=repo[1],
                rel=recorded.rel,
                dest=dest,
                sha256=recorded.sha256,
                confine=ctx.confine,
            )
            if not answer.get("ok"):
                raise ActionError(str(answer.get("error")))
            staged = str(answer["path"])
        answer = ctx.target.call(
            "install_file",
            staged=staged,
            dest=dest,
            sha256=recorded.sha256,
            mode=recorded.mode,
            stamp=ctx.stamp,
            confine=ctx.confine,
        )
    except EnvguardError as exc:
        return Item(kind="file", name=name, status="failed", detail=exc.message)
    except BaseException:  # an interrupt: the file untouched, nothing staged left beside
        if staged is not None:
            ctx.target.discard([staged])
        raise
    if not answer.get("ok"):
        return Item(kind="file", name=name, status="failed", detail=str(answer.get("error")))
    if answer.get("sha256") != recorded.sha256:  # a far side's word is checked too
        return Item(kind="file", name=name, status="failed", detail=f"{dest}: not verified")
    if answer.get("same") and answer.get("mode_set"):  # the content was right, not the mode
        detail = (
            f"{dest}: executable again"
            if recorded.mode and recorded.mode & 0o111
            else (f"{dest}: not executable again")
        )
        return Item(kind="file", name=name, status="restored", detail=detail)
    if answer.get("same"):  # a checkout (--repos) put it back already
        return Item(kind="file", name=name, status="already", detail=f"same ({dest})")
    return Item(
        kind="file",
        name=name,
        status="restored",
        detail=f"{dest} from {source}",
        **_digests(answer),
        kept=answer.get("displaced"),
    )


def _git_source(ctx: Context, recorded: FileDigest) -> tuple[str, str] | None:
    """(the live work tree, the recorded HEAD) that can supply ``recorded`` from git."""
    if recorded.root is None or recorded.rel is None:
        return None
    head = next((r.head for r in ctx.snap.repos if r.path == recorded.root and r.head), None)
    if head is not None and not _COMMIT.match(head):
        return None  # a branch or HEAD~1 names no fixed content
    live = _by_path(ctx.live.files).get(_key(recorded.path))
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


def will_hit(cache: Cache, snap: Snapshot, live: Snapshot) -> str | None:
    """Whether a cache kept in ``snap`` will be used in ``live`` (compare/forecast.py), in
    words; None for a folder that is no compile cache envguard knows the key of."""
    if cache.kind not in DEFAULT_KINDS and not cache.builds:
        return None
    reasons = forecast("triton" if cache.kind == "triton" else "inductor", snap, live)
    misses = [r.why for r in reasons if r.verdict == "miss"]
    why = stale(cache, live)  # the kept entries' own word, when no ingredient says more
    if misses or why:
        return f"it will miss here: {'; '.join(misses or [str(why)])}"
    for verdict, said in (
        ("rebuild", "it will hit, then rebuild its C++ kernels"),
        ("may-miss", "it may miss here"),
    ):
        found = [r.why for r in reasons if r.verdict == verdict]
        if found:
            return f"{said}: {'; '.join(found)}"
    return "it will hit: nothing in its key changed"


def restore_caches(ctx: Context, stack_live: Snapshot, *, rebuild_pending: bool) -> list[Item]:
    """Each kept compile cache put back (extracted beside, renamed in), only on the exact
    stack it was compiled for (in a plan whose packages are still to be rebuilt: the GPU
    and driver now, the rest once they are)."""
    live = {(c.kind, _key(c.path)): c for c in ctx.live.caches}
    items = []
    for cache in one_per_folder(ctx.snap.caches):
        if cache.archive is None:
            continue
        now = live.get((cache.kind, _key(cache.path)))
        items.append(_restore_cache(ctx, cache, now, stack_live, rebuild_pending))
    return items


def _restore_cache(
    ctx: Context, cache: Cache, now: Cache | None, stack_live: Snapshot, rebuild_pending: bool
) -> Item:
    archive = cache.archive
    assert archive is not None
    name = f"{cache.kind} cache"
    if now is None:
        return Item(kind="cache", name=name, status="refused", detail=_UNMEASURED)
    if now.error and now.error.startswith(OUTSIDE):
        detail = f"{cache.path}: {NOT_WRITTEN}"
        return Item(kind="cache", name=name, status="refused", detail=detail)
    differs = stack_difference(ctx.snap, stack_live, machine_only=rebuild_pending)
    if differs is not None:
        return Item(
            kind="cache",
            name=name,
            status="refused",
            detail=f"{cache.path}: compiled for another stack ({differs})",
        )
    # Whether it will be used once back: known now, or once the packages match.
    hit = None if rebuild_pending else will_hit(cache, ctx.snap, stack_live)
    hit = f"; {hit}" if hit else ""
    if now.exists and (now.files, now.bytes) == (archive.files, archive.bytes):
        return Item(
            kind="cache",
            name=name,
            status="already",
            detail=f"{cache.path}: {archive.files} files, {archive.bytes} bytes, as kept{hit}",
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
            + (" once the packages match (the stack is checked then)" if rebuild_pending else "")
            + hit,
        )
    ctx.status(f"restoring {cache.path}")
    try:
        # This host unpacks straight from the store; the far side gets a staged copy.
        staged = (
            ctx.target.send(found, cache.path, confine=ctx.confine, cache=True)
            if ctx.target.remote
            else str(found)
        )
        answer = ctx.target.call(
            "extract",
            confine=ctx.confine,
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
        detail=f"{cache.path}: {answer['files']} files, {answer['bytes']} bytes{hit}",
        verified=f"archive sha256 {archive.sha256[:16]}..., file count and bytes",
        kept=answer.get("displaced"),
    )


def restore_repos(ctx: Context, *, root: str | None) -> list[Item]:
    """Each recorded repo back at its recorded HEAD: everything (untracked too) stashed
    first, the stash named; refused when the commit is not there."""
    from envguard.snapshots.live import Recorded, moved_repos

    live = _by_path(ctx.live.repos)
    moved = moved_repos(Recorded.of(ctx.snap), root)
    # A repo recorded only because an editable install lives in it (envguard's own
    # checkout, a library being hacked on) is not the training code: left alone, unless a
    # tracked file lies in it. Both sides' installs count (a snapshot may leave its out).
    editable = [
        p.source.path
        for snap in (ctx.snap, ctx.live)
        for p in snap.packages
        if p.source.kind == "editable" and p.source.path
    ]
    tracked = {f.root for f in ctx.snap.files}
    items = []
    for recorded in ctx.snap.repos:
        if not recorded.head:
            continue
        path = moved.get(recorded.path, recorded.path)
        inside = [e for e in editable if _key(e + "/x").startswith(_key(path) + "/")]
        if inside and recorded.path not in tracked:
            items.append(
                Item(
                    kind="repo",
                    name=path,
                    status="skipped",
                    detail="the checkout of an editable install, no tracked file in it:"
                    f" left as it is (git -C {shlex.quote(path)} checkout"
                    f" {recorded.head[:12]} restores it)",
                )
            )
            continue
        items.append(_restore_repo(ctx, recorded, live.get(_key(recorded.path)), path))
    return items


_COMMIT = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")


def _restore_repo(ctx: Context, recorded: Repo, now: Repo | None, path: str) -> Item:
    head = recorded.head
    assert head is not None
    if not _COMMIT.match(head):
        return Item(kind="repo", name=path, status="refused", detail="HEAD is not a commit id")
    if now is None:
        return Item(kind="repo", name=path, status="refused", detail=_UNMEASURED)
    if now.error:
        detail = NOT_WRITTEN if now.error.startswith(OUTSIDE) else now.error
        return Item(kind="repo", name=path, status="refused", detail=detail)
    if now.head == head and not now.dirty and not now.untracked:
        return Item(kind="repo", name=path, status="already", detail=f"at {head[:12]}, clean")

    def run(*argv: str) -> dict[str, object]:
        # No filter, fsmonitor program, hook or pager from the repo's config, no bare repo:
        # the checkout writes the committed blobs as they are (confine.run_git).
        return ctx.target.call("git", repo=path, argv=list(argv), confine=ctx.confine)

    known = run("cat-file", "-e", f"{head}^{{commit}}")
    if not known.get("ok"):
        return Item(kind="repo", name=path, status="refused", detail=_tail(known))
    if known.get("code") != 0:
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
    if now.dirty or now.untracked:
        message = f"envguard restore {ctx.snap.name} {ctx.stamp}"
        keep_out = [
            f":(exclude,top){os.path.relpath(p, path)}"
            for p in ctx.keep_out
            if not ctx.target.remote and _key(p).startswith(_key(path) + "/")
        ]
        # The snapshot's folder (its store) and the variables file stay: later items need
        # them, and the stash must pop cleanly over a restored tree.
        spec = ["--", ":/", *keep_out] if keep_out else []
        stashed = run("stash", "push", "--include-untracked", "-m", message, *spec)
        if stashed.get("code") != 0:
            return Item(kind="repo", name=path, status="failed", detail=_tail(stashed))
        listed = run("stash", "list", "--format=%H %s")
        for line in listed.get("tail", []):  # type: ignore[attr-defined]
            if ctx.stamp in line:
                sha = line.split(" ", 1)[0]
                kept = f"stash {sha[:12]} in {path} (git stash apply {sha[:12]} gets it back)"
    checked = run("checkout", "--quiet", "--detach", head)
    if checked.get("code") != 0:
        return Item(kind="repo", name=path, status="failed", detail=_tail(checked), kept=kept)
    now_head = run("rev-parse", "HEAD")
    if _tail(now_head) != head:
        return Item(kind="repo", name=path, status="failed", detail="HEAD did not move there")
    return Item(
        kind="repo",
        name=path,
        status="restored",
        detail=f"checked out {head[:12]} (detached)",
        verified="git rev-parse HEAD is the recorded commit",
        kept=kept,
    )


def _tail(answer: dict[str, object]) -> str:
    lines = answer.get("tail") or [answer.get("error") or "no output"]
    return str(lines[-1])[:200]  # type: ignore[index]


def write_env_file(ctx: Context, path: str) -> Item:
    """The variables file, written through the target like any restored file."""
    import hashlib

    text, left_out = env_file_text(ctx.snap, ctx.live.env, trust=ctx.trust)
    detail = f"{path}: source it ('. {shlex.quote(path)}')" + (
        f"; redacted, not written: {', '.join(left_out)}" if left_out else ""
    )
    if not ctx.execute:
        return Item(kind="env", name="variables", status="planned", detail=f"write {detail}")
    data = text.encode()
    staged: str | None = None
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
    except BaseException:  # an interrupt: nothing staged left beside the file
        if staged is not None:
            ctx.target.discard([staged])
        raise
    if not answer.get("ok"):
        return Item(kind="env", name="variables", status="failed", detail=str(answer["error"]))
    if answer.get("same"):
        return Item(kind="env", name="variables", status="already", detail=detail)
    return Item(
        kind="env",
        name="variables",
        status="restored",
        detail=detail,
        **_digests(answer),
        kept=answer.get("displaced"),
    )
