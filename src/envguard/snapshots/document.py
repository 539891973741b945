"""A snapshot as its file holds it, assembled as plain JSON data from the probe's validated
report: the one place where a snapshot's fields are filled in.

``Snapshot.model_validate(document)`` is its typed model (the API's, diff's, restore's).
``envguard snapshot`` writes the document without importing pydantic: :func:`fits` accepts
a document only where the model would take it unchanged (tests/snapshots/test_document.py
holds the two to the same answer and the same bytes on fuzzed reports); whatever it is not
sure of goes to the model, whose result, or error, is then the answer.
"""

from __future__ import annotations

import shlex
import time
from urllib.parse import unquote, urlsplit

from envguard.confine import OUTSIDE
from envguard.errors import UsageError
from envguard.redact import redact_argv, redact_env, redact_metrics, redact_text, redact_url
from envguard.snapshots import builders, shape
from envguard.snapshots.checks import MAX_AT_START, line
from envguard.snapshots.request import USER_CACHE
from envguard.tools import changed_in_process
from envguard.version import SCHEMA_VERSION, __version__

TYPE_CHECKING = False  # typing is not loaded for a command's start

if TYPE_CHECKING:
    from typing import Any

    from envguard.probe.report_shape import (
        ProbeReport,
        ReportCache,
        ReportDist,
        ReportFile,
        ReportLibrary,
        ReportRepo,
        ReportTorch,
    )
    from envguard.snapshots.models import Snapshot
    from envguard.snapshots.request import CaptureRequest

if TYPE_CHECKING:
    Document = dict[str, Any]
else:
    Document = dict

# What a live side carries for diff and a snapshot file never holds (Field(exclude=True)).
LIVE_ONLY = shape.LIVE_ONLY

# The distributions that carry torch's GPU libraries, by the field they fill.
_STACK_PREFIXES = {
    "cudnn": ("nvidia-cudnn",),
    "nccl": ("nvidia-nccl",),
    "cublas": ("nvidia-cublas",),
    "triton": ("triton", "pytorch-triton"),
}


def file_url_path(url: str) -> str | None:
    """The local path of a file:// URL, else None (also for one that does not parse)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # a forged report's "file://[x/y" (an unclosed IPv6 host)
        return None
    return unquote(parts.path) if parts.scheme == "file" else None


def _source(kind: str = "index", url: str | None = None, **fields: Any) -> Document:
    return {
        "kind": kind,
        "url": url,
        "vcs": None,
        "commit": None,
        "requested_revision": None,
        "path": None,
        "archive_hash": None,
        "subdirectory": None,
        **fields,
    }


def source_from_direct_url(data: Any) -> Document:
    """Where a distribution came from, from its PEP 610 direct_url.json (None: an index)."""
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return _source()
    # The far side redacts too, but a forged report is checked here again: never stored.
    url: str = redact_url(data["url"])
    subdirectory = data.get("subdirectory") if isinstance(data.get("subdirectory"), str) else None
    if isinstance(data.get("vcs_info"), dict):
        vcs = data["vcs_info"]
        return _source(
            "vcs",
            url,
            vcs=vcs.get("vcs"),
            commit=vcs.get("commit_id"),
            requested_revision=vcs.get("requested_revision"),
            subdirectory=subdirectory,
        )
    if isinstance(data.get("dir_info"), dict):
        editable = bool(data["dir_info"].get("editable"))
        return _source(
            "editable" if editable else "dir",
            url,
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
    return _source(
        "url", url, path=file_url_path(url), archive_hash=archive_hash, subdirectory=subdirectory
    )


def package(raw: ReportDist) -> Document:
    return {
        "name": raw["name"],
        "display_name": raw["display_name"],
        "version": raw["version"],
        "installer": raw["installer"],
        "requested": raw["requested"],
        "location": raw["location"],
        "source": source_from_direct_url(raw["direct_url"]),
        "fingerprint": raw["fingerprint"],
        "shadowed": raw["shadowed"],
        "requires": list(raw.get("requires", ())),
        "on_disk": raw.get("on_disk"),
    }


def stack_versions(versions: dict[str, str]) -> dict[str, str | None]:
    """cuDNN, NCCL, cuBLAS and triton versions from the distributions that ship them
    (``versions``: canonical name -> version of the packages the interpreter imports)."""
    found: dict[str, str | None] = dict.fromkeys(_STACK_PREFIXES)
    for name in sorted(versions):
        for field, prefixes in _STACK_PREFIXES.items():
            if found[field] is None and any(
                name == p or name.startswith(p + "-") for p in prefixes
            ):
                found[field] = versions[name]
    return found


def torch_build(raw: ReportTorch | None, versions: dict[str, str]) -> Document | None:
    return None if raw is None else {**raw, **stack_versions(versions)}


def _libraries(raw: list[ReportLibrary]) -> list[Document]:
    return sorted(
        ({**lib, "also_claimed_by": sorted(lib["also_claimed_by"])} for lib in raw),
        key=lambda lib: (str(lib["path"]), str(lib["name"])),
    )


def _repos(request: CaptureRequest, raw: list[ReportRepo]) -> list[Document]:
    repos = []
    for repo in raw:
        if repo.get("error"):
            if str(repo["error"]).startswith(OUTSIDE):
                repos.append(_repo(path=repo["path"], error=repo["error"]))
                continue
            if not request.strict:
                continue  # gone: diff reports it missing
            where = " (on the far side of --via)" if request.via else ""
            raise UsageError(f"--repo {repo['path']}: {repo.get('error')}{where}")
        fields: dict[str, Any] = {k: v for k, v in repo.items() if k != "error"}
        fields["path"] = request.repo_keys.get(repo["path"], repo["path"])
        repos.append(_repo(**fields))
    return sorted(repos, key=lambda r: str(r["path"]))


def _repo(**fields: Any) -> Document:
    return {
        "head": None,
        "branch": None,
        "dirty": False,
        "diff_sha256": None,
        "untracked": 0,
        "remote": None,
        **fields,
    }


def _files(raw: list[ReportFile], request: CaptureRequest, tops: list[str]) -> list[Document]:
    """The probe's hashes, each placed in its work tree (or --root); a live file read where
    its checkout lies now keeps the path it was recorded under."""
    keys = request.file_keys if len(request.file_keys) == len(raw) else (None,) * len(raw)
    out = []
    for f, key in zip(raw, keys, strict=True):
        error = f["error"]
        if error and request.strict:
            raise UsageError(f"--file {f['path']}: {error.lower()}")
        root, rel = place(f["path"], tops)
        digest: Document = {
            "path": key or f["path"],
            "sha256": f["sha256"],
            "size": f["size"],
            "mode": f["mode"],
            "root": root,
            "rel": rel,
        }
        if key and key != f["path"]:
            digest["read_from"] = f["path"]
        if error:
            digest["error"] = error
        out.append(digest)
    return sorted(out, key=lambda f: str(f["path"]))


def place(path: str, tops: list[str]) -> tuple[str | None, str | None]:
    """(the deepest of ``tops`` holding ``path``, the path below it) or (None, None)."""
    for top in sorted(tops, key=len, reverse=True):
        head = top.rstrip("/") + "/"
        if path.startswith(head) and len(path) > len(head):
            return top, path[len(head) :]
    return None, None


def _caches(raw: list[ReportCache]) -> list[Document]:
    caches: dict[str, Document] = {}
    for c in raw:
        path = redact_url(c["path"])
        cache: Document = {
            "kind": c["kind"],
            "path": path,
            "exists": c["exists"],
            "readable": c["readable"],
            "bytes": c["bytes"],
            "files": c["files"],
            "newest_mtime": c["newest_mtime"],
            "archive": None,
            "fs": c["fs"],
            "builds": sorted(c["builds"], key=lambda b: (-b["entries"], str(b["torch"]))),
        }
        if c.get("error"):
            cache["error"] = c["error"]
        # One entry a folder: `--cache DIR` naming the folder $TORCHINDUCTOR_CACHE_DIR
        # names is one cache, and its named kind says more than a plain --cache.
        held = caches.get(path)
        if held is None or (held["kind"] == USER_CACHE and c["kind"] != USER_CACHE):
            caches[path] = cache
    return sorted(caches.values(), key=lambda c: (c["kind"], c["path"]))


def _at_start(recorded: dict[str, str]) -> dict[str, str | None] | None:
    """Each variable the probe records that this process set, changed or unset since it
    started (the probe inherited what it has now), with its value at that start as the
    probe would have recorded it (None: not set then); None where that start cannot be
    read. envguard's command line changes none: {} at no cost."""
    changed = changed_in_process()
    if not changed:
        return changed
    from envguard.probe.payload import local_package

    rules = local_package().env  # the probe's own rule and form (its prefixes, redaction)
    wanted = {
        name: value
        for name, value in changed.items()
        if name in recorded
        or ((name.startswith(rules.ENV_PREFIXES) or name in rules.ENV_NAMES) and line(name))
    }
    told = rules.capture_env({n: v for n, v in wanted.items() if v is not None})
    start = {n: told.get(n) for n, v in wanted.items() if v is None or n in told}
    return dict(list(start.items())[:MAX_AT_START])


def created_now() -> str:
    """Now, to the microsecond (`log` orders by it), spelt as the model writes a datetime
    (``datetime.now(timezone.utc).isoformat()``, "Z" for "+00:00": no fraction when it is
    zero). By the time module: datetime's import is a millisecond of a snapshot's CPU."""
    seconds, micro = divmod(time.time_ns() // 1000, 1_000_000)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{text}.{micro:06d}Z" if micro else f"{text}Z"


def from_report(report: ProbeReport, request: CaptureRequest) -> Document:
    """The snapshot of ``report`` and ``request`` (repos included, on this host too)."""
    packages = sorted(
        (package(raw) for raw in report["packages"]),
        key=lambda p: (p["name"], p["shadowed"], p["location"]),
    )
    versions = {p["name"]: p["version"] for p in packages if not p["shadowed"]}
    tops = ([str(request.root)] if request.root is not None else []) + [
        r["path"] for r in report["repos"] if not r.get("error")
    ]
    return {
        "schema_version": SCHEMA_VERSION,
        "schema_minor": shape.SCHEMA_MINOR,
        "name": request.name,
        "created": created_now(),
        # What a (possibly forged) report says is redacted here as well as on the far side.
        "host": redact_text(report["host"]),
        "user": report["user"],
        "envguard_version": __version__,
        "command": redact_argv(list(request.command)),
        "via": shlex.join(redact_argv(list(request.via))) if request.via else None,
        "note": None if request.note is None else redact_text(request.note),
        "metrics": redact_metrics(request.metrics),
        "interpreter": report["interpreter"],
        "packages": packages,
        "torch": torch_build(report["torch"], versions),
        "libraries": _libraries(report["libraries"]),
        "accelerator": report["accelerator"],
        "host_layer": report["host_layer"],
        "repos": _repos(request, report["repos"]),
        "files": _files(report["files"], request, tops),
        "caches": _caches(report["caches"]),
        "env": redact_env(report["env"]),  # whatever the far side did
        "env_at_start": None if request.via else _at_start(report["env"]),
        "warnings": [redact_text(w) for w in report["warnings"]],
        "clashes": report.get("clashes"),
        "unowned": report.get("unowned"),
        "fit": report.get("fit"),
        "compile": report["compile"],
        "signature": None,  # signed as it is written (snapshots/signing.py), if at all
    }


def stored(document: Document) -> Document:
    """``document`` as a snapshot file holds it: without what only a live side carries,
    and of this envguard's schema minor (the model's serializer writes it so, whatever
    the document says: a file written now holds every field this envguard knows)."""
    out = dict(document)
    if "schema_minor" in out:
        out["schema_minor"] = shape.SCHEMA_MINOR
    for section, fields in LIVE_ONLY.items():
        if any(f in item for item in document[section] for f in fields):
            out[section] = [
                {k: v for k, v in item.items() if k not in fields} for item in document[section]
            ]
    return out


# fits() and built() are generated from the models (snapshots/shape.py, builders.py).
fits = shape.fits


def built(doc: Document) -> Snapshot:
    """The model of a document fits() vouched for, built without validation."""
    from envguard.snapshots import models

    return builders.built(doc, models)


# ---- typed(): the model of a document ------------------------------------------------------

# Building a model directly costs a little more a package than pydantic's validation,
# whose validators cost a lot to build, once per process (pydantic's plugin loader imports
# importlib.metadata on the way): a process that reads one or two snapshots (diff, check,
# show) builds its models directly; one that reads many (fleet) builds the validators
# once this budget of packages is spent (the figures: docs/benchmarks.md).
_DIRECT_PACKAGES = 3000
_spent = [0]


def building_directly() -> bool:
    """True while this process still builds snapshot models directly (see typed())."""
    return _spent[0] < _DIRECT_PACKAGES


def typed(doc: Document) -> Snapshot:
    """The Snapshot of ``doc``: built directly where fits() vouches for it, else validated by
    the model (pydantic's ValidationError when it is not a snapshot). The two give equal
    models (tests/snapshots/test_document.py holds them to it on fuzzed reports)."""
    from envguard.snapshots.models import Snapshot

    if vouched(doc):
        return built(doc)
    return Snapshot.model_validate(doc)


def vouched(doc: Document) -> bool:
    """Whether typed(doc) builds its model directly: fits() vouches for it, and this
    process still builds models so (its budget is spent here, as typed() spends it)."""
    if type(doc) is dict and type(doc.get("packages")) is list and building_directly():
        size = len(doc["packages"])
        if _spent[0] + size > _DIRECT_PACKAGES:
            _spent[0] = _DIRECT_PACKAGES  # spent: from here on, the validators
        elif fits(doc):
            _spent[0] += size
            return True
    return False
