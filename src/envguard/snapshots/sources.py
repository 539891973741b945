"""Turn the probe's raw records into models: package sources and torch's GPU stack."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from envguard.redact import redact_url
from envguard.snapshots.models import Package, Source, TorchBuild

if TYPE_CHECKING:
    from envguard.probe.report import ReportDist, ReportTorch

# The distributions that carry torch's GPU libraries, by the field they fill.
_STACK_PREFIXES = {
    "cudnn": ("nvidia-cudnn",),
    "nccl": ("nvidia-nccl",),
    "cublas": ("nvidia-cublas",),
    "triton": ("triton", "pytorch-triton"),
}


def file_url_path(url: str) -> str | None:
    """The local path of a file:// URL, else None."""
    parts = urlsplit(url)
    return unquote(parts.path) if parts.scheme == "file" else None


def source_from_direct_url(data: Any) -> Source:
    """A Source from a PEP 610 direct_url.json document (None: installed from an index)."""
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return Source()
    # The far side redacts too, but a forged report is checked here again: never stored.
    url: str = redact_url(data["url"])
    subdirectory = data.get("subdirectory") if isinstance(data.get("subdirectory"), str) else None
    if isinstance(data.get("vcs_info"), dict):
        vcs = data["vcs_info"]
        return Source(
            kind="vcs",
            url=url,
            vcs=vcs.get("vcs"),
            commit=vcs.get("commit_id"),
            requested_revision=vcs.get("requested_revision"),
            subdirectory=subdirectory,
        )
    if isinstance(data.get("dir_info"), dict):
        editable = bool(data["dir_info"].get("editable"))
        return Source(
            kind="editable" if editable else "dir",
            url=url,
            path=file_url_path(url),
            subdirectory=subdirectory,
        )
    archive = data.get("archive_info")
    archive = archive if isinstance(archive, dict) else {}
    hashes = archive.get("hashes")
    hashes = hashes if isinstance(hashes, dict) else {}
    archive_hash = None
    if isinstance(hashes.get("sha256"), str):
        archive_hash = "sha256=" + hashes["sha256"]
    elif isinstance(archive.get("hash"), str):
        archive_hash = archive["hash"]
    return Source(
        kind="url",
        url=url,
        path=file_url_path(url),
        archive_hash=archive_hash,
        subdirectory=subdirectory,
    )


def package_from_probe(raw: ReportDist) -> Package:
    return Package(
        name=raw["name"],
        display_name=raw["display_name"],
        version=raw["version"],
        installer=raw["installer"],
        requested=raw["requested"],
        location=raw["location"],
        source=source_from_direct_url(raw["direct_url"]),
        fingerprint=raw["fingerprint"],
        shadowed=raw["shadowed"],
        requires=tuple(raw.get("requires", ())),
    )


def stack_versions(packages: dict[str, Package]) -> dict[str, str | None]:
    """cuDNN, NCCL, cuBLAS and triton versions from the distributions that ship them."""
    found: dict[str, str | None] = dict.fromkeys(_STACK_PREFIXES)
    for name in sorted(packages):
        for field, prefixes in _STACK_PREFIXES.items():
            if found[field] is None and any(
                name == p or name.startswith(p + "-") for p in prefixes
            ):
                found[field] = packages[name].version
    return found


def torch_from_probe(raw: ReportTorch | None, packages: dict[str, Package]) -> TorchBuild | None:
    if raw is None:
        return None
    return TorchBuild(**raw, **stack_versions(packages))
