"""`snapshot --keep-files` and `--keep-cache`: the contents a restore needs, put in the
content store (snapshots/blobs.py), read on the target (this host, or through --via)."""

from __future__ import annotations

import base64
import hashlib
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envguard.errors import ActionError

if TYPE_CHECKING:
    from envguard.probe.channel import RemoteTarget, Target
    from envguard.snapshots.blobs import Blobs
    from envguard.snapshots.models import Cache, Snapshot

# A compile cache sent back through --via larger than this is refused (stopped there).
REMOTE_CACHE_CAP = 8 << 30


# A tracked file read through --via larger than this is refused, by name (one at a time,
# streamed into the store: none is held whole in memory).
REMOTE_FILE_CAP = 4 << 30


def keep_files(snap: Snapshot, blobs: Blobs, target: Target) -> tuple[Snapshot, list[str]]:
    """Store the content of each tracked file that still hashes as recorded."""
    paths = [f.path for f in snap.files if f.sha256]
    if not paths:
        return snap, []
    if target.remote:
        from envguard.probe.channel import RemoteTarget

        assert isinstance(target, RemoteTarget)
        warnings = []
        for f in snap.files:
            if f.sha256 and _fetch_file(f.path, blobs, target) != f.sha256:
                warnings.append(f"{f.path}: changed while the snapshot was taken; content not kept")
        return snap, warnings
    answer = target.call("read_files", paths=paths)
    if not answer.get("ok"):
        raise ActionError(f"--keep-files: {answer.get('error')}")
    warnings = []
    contents = answer["files"]
    for f in snap.files:
        try:
            text = contents.get(f.path, "") if f.sha256 else ""
            data = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
        except ValueError:  # binascii.Error: not base64, from a far side
            data = b""
        if f.sha256 and hashlib.sha256(data).hexdigest() != f.sha256:
            warnings.append(f"{f.path}: changed while the snapshot was taken; content not kept")
        elif f.sha256:
            blobs.add_bytes(data)
    return snap, warnings


def _fetch_file(path: str, blobs: Blobs, target: RemoteTarget) -> str:
    """One far-side file streamed into the store; its sha256, as it was read."""
    from envguard.errors import ProbeError
    from envguard.units import human_size

    def receive(fh: Any) -> None:
        target.fetch("cat", cap=REMOTE_FILE_CAP, sink=fh, path=path, limit=REMOTE_FILE_CAP)

    try:
        return blobs.write(receive)[0]
    except (ProbeError, ActionError) as exc:  # past the cap: stopped there, or here
        if "larger than" not in exc.message:
            raise
        raise ActionError(
            f"--keep-files: {path} is larger than {human_size(REMOTE_FILE_CAP)}, the cap for"
            " one file read through --via; not kept",
            hint="track a smaller file, or keep this one yourself",
        ) from None


def keep_caches(snap: Snapshot, blobs: Blobs, target: Target) -> Snapshot:
    """Archive each compile cache that exists into the store; the snapshot says which."""

    kept: list[Cache] = []
    warnings: list[str] = []
    for cache in snap.caches:
        if not cache.exists or not cache.readable or cache.files == 0 or cache.error:
            kept.append(cache)
            continue
        try:
            kept.append(_keep_cache(cache, blobs, target))
        except ActionError as exc:  # a link planted in /tmp, another user's folder, ...
            warnings.append(f"{cache.path}: not kept ({exc.message})")
            kept.append(cache)
    return snap.model_copy(update={"caches": tuple(kept), "warnings": (*snap.warnings, *warnings)})


def _keep_cache(cache: Cache, blobs: Blobs, target: Target) -> Cache:
    """``cache`` with its archive in the store (read on the target)."""
    from envguard.snapshots.models import CacheArchive

    counts: dict[str, Any] = {}
    if target.remote:
        from envguard.probe.channel import RemoteTarget

        assert isinstance(target, RemoteTarget)

        def receive(fh: Any, path: str = cache.path, remote: RemoteTarget = target) -> None:
            remote.fetch("pack", cap=REMOTE_CACHE_CAP, sink=fh, base=path)

        sha, size = blobs.write(receive)  # streamed into the store, never held whole
        counts = archive_counts(blobs.path(sha))
    else:
        from envguard.probe.payload import local_package

        def fill(fh: Any, path: str = cache.path, counts: dict[str, Any] = counts) -> None:
            counts.update(local_package().apply.pack(fh, path))

        sha, size = blobs.write(fill)
    archive = CacheArchive(
        sha256=sha, files=counts["files"], bytes=counts["bytes"], compressed=size
    )
    return cache.model_copy(update={"archive": archive})


def archive_counts(path: Path) -> dict[str, int]:
    """Regular files and their bytes in a gzip tarball."""
    files = size = 0
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                if member.isreg():
                    files += 1
                    size += member.size
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise ActionError(f"--keep-cache: the archive that came back is damaged ({exc})") from None
    return {"files": files, "bytes": size}
