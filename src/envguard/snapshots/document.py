"""A snapshot as its file holds it, assembled as plain JSON data from the probe's validated
report: the one place where a snapshot's fields are filled in.

``Snapshot.model_validate(document)`` is its typed model (the API's, diff's, restore's).
``envguard snapshot`` writes the document without importing pydantic: :func:`fits` accepts
a document only where the model would take it unchanged (tests/snapshots/test_document.py
holds the two to the same answer and the same bytes on fuzzed reports); whatever it is not
sure of goes to the model, whose result, or error, is then the answer.
"""

from __future__ import annotations

import re
import shlex
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from envguard.confine import OUTSIDE
from envguard.errors import UsageError
from envguard.reading import UNSAFE_CHARS
from envguard.redact import redact_argv, redact_env, redact_metrics, redact_text, redact_url
from envguard.version import SCHEMA_VERSION, __version__

if TYPE_CHECKING:
    from envguard.probe.report import (
        ProbeReport,
        ReportCache,
        ReportDist,
        ReportFile,
        ReportRepo,
        ReportTorch,
    )
    from envguard.snapshots.models import Snapshot
    from envguard.snapshots.request import CaptureRequest

Document = dict[str, Any]

# What a live side carries for diff and a snapshot file never holds (Field(exclude=True)).
LIVE_ONLY = {"files": ("read_from", "error"), "repos": ("error",), "caches": ("error",)}

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
    caches = {}
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
        }
        if c.get("error"):
            cache["error"] = c["error"]
        caches[(c["kind"], path)] = cache
    return [caches[key] for key in sorted(caches)]


def created_now() -> str:
    """Now, to the microsecond (`log` orders by it), spelt as the model writes a datetime."""
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


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
        "accelerator": report["accelerator"],
        "repos": _repos(request, report["repos"]),
        "files": _files(report["files"], request, tops),
        "caches": _caches(report["caches"]),
        "env": redact_env(report["env"]),  # whatever the far side did
        "warnings": [redact_text(w) for w in report["warnings"]],
    }


def stored(document: Document) -> Document:
    """``document`` as a snapshot file holds it: without what only a live side carries."""
    out = dict(document)
    for section, fields in LIVE_ONLY.items():
        if any(f in item for item in document[section] for f in fields):
            out[section] = [
                {k: v for k, v in item.items() if k not in fields} for item in document[section]
            ]
    return out


# ---- fits(): would the model take this document unchanged? ---------------------------------

_UNSAFE = re.compile("[" + UNSAFE_CHARS + "]")
# pydantic takes a lone surrogate in a plain str field but refuses it where a pattern or a
# length applies (it cannot make that text UTF-8): those fields are vouched for without one.
_SURROGATE = re.compile("[\ud800-\udfff]")
_SHA256 = re.compile("[0-9a-f]{64}")
_MAX_VERSION, _MAX_REQUIREMENT, _MAX_REQUIRES = 256, 512, 2000  # as the models say


def _str(value: object) -> bool:
    return type(value) is str


def _opt_str(value: object) -> bool:
    return value is None or type(value) is str


def _line(value: object) -> bool:
    """One line of text (the models' ``Line`` pattern)."""
    return type(value) is str and not _UNSAFE.search(value) and not _SURROGATE.search(value)


def _bounded(value: object, most: int) -> bool:
    """A string of at most ``most`` characters (the models' ``max_length``)."""
    return type(value) is str and len(value) <= most and not _SURROGATE.search(value)


def _int(value: object) -> bool:
    return type(value) is int


def _bool(value: object) -> bool:
    return type(value) is bool


def _keys(item: object, fields: frozenset[str]) -> bool:
    return type(item) is dict and item.keys() == fields


_SOURCE = frozenset(_source())
_PACKAGE = frozenset(
    {"name", "display_name", "version", "installer", "requested", "location", "source"}
    | {"fingerprint", "shadowed", "requires"}
)
_TORCH = frozenset({"version", "cuda", "git_version", "hip", "debug", *_STACK_PREFIXES})
_ACCELERATOR = frozenset({"present", "driver", "gpus", "count", "nvcc", "source"})
_INTERPRETER = frozenset(
    {"version", "implementation", "executable", "prefix", "base_prefix", "is_venv", "os"}
    | {"machine", "libc", "site_packages", "markers"}
)
_REPO = frozenset(_repo(path=""))
_FILE = frozenset({"path", "sha256", "size", "root", "rel"})
_CACHE = frozenset(
    {"kind", "path", "exists", "readable", "bytes", "files", "newest_mtime", "archive"}
)
_SNAPSHOT = frozenset(
    {"schema_version", "name", "created", "host", "user", "envguard_version", "command"}
    | {"via", "note", "metrics", "interpreter", "packages", "torch", "accelerator", "repos"}
    | {"files", "caches", "env", "warnings"}
)
# What created_now() writes: UTC, seconds or microseconds (ASCII digits: \d takes any
# script's, which a snapshot file may hold and datetime does not read).
_CREATED = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{6})?Z")


def _created(value: object) -> bool:
    """A time as created_now() writes it, and a real one (not the 31st of February)."""
    if type(value) is not str or not _CREATED.fullmatch(value):
        return False
    datetime.fromisoformat(value.replace("Z", "+00:00"))  # ValueError: fits() says False
    return True


def fits(doc: Document) -> bool:
    """True when ``Snapshot.model_validate(doc)`` accepts ``doc`` and dumps it unchanged
    (``stored(doc)``); False when unsure (the model then decides). Only documents of the
    shape from_report() builds are ever True."""
    try:
        return _fits(doc)
    except (KeyError, TypeError, AttributeError, ValueError):
        return False


def _fits(doc: Document) -> bool:
    if not _keys(doc, _SNAPSHOT) or not (
        _int(doc["schema_version"])
        and doc["schema_version"] == SCHEMA_VERSION
        and all(_line(doc[k]) for k in ("name", "host", "user"))
        and _str(doc["envguard_version"])
        and _created(doc["created"])
        and all(_opt_str(doc[k]) for k in ("via", "note"))
        and _strs(doc["command"])
        and _strs(doc["warnings"])
        and _metrics(doc["metrics"])
        and _env(doc["env"])
    ):
        return False
    return (
        _interpreter(doc["interpreter"])
        and _packages(doc["packages"])
        and (doc["torch"] is None or _torch(doc["torch"]))
        and _accelerator(doc["accelerator"])
        and type(doc["repos"]) is list
        and all(_repo_fits(r) for r in doc["repos"])
        and type(doc["files"]) is list
        and all(_file_fits(f) for f in doc["files"])
        and type(doc["caches"]) is list
        and all(_cache_fits(c) for c in doc["caches"])
    )


def _strs(items: object) -> bool:
    return type(items) is list and all(type(s) is str for s in items)


def _metrics(metrics: object) -> bool:
    # int | float | str, no NaN or infinity; a float that is a whole number stays a float.
    return type(metrics) is dict and all(
        type(k) is str
        and (type(v) in (int, str) or (type(v) is float and v == v and v not in (_INF, -_INF)))
        for k, v in metrics.items()
    )


_INF = float("inf")


def _env(env: object) -> bool:
    # The model redacts (redact_env sorts, digests secrets): taken as is only when it is so.
    return (
        type(env) is dict
        and all(type(k) is str and type(v) is str for k, v in env.items())
        and redact_env(env) == env
    )


def _interpreter(i: object) -> bool:
    return (
        _keys(i, _INTERPRETER)
        and isinstance(i, dict)
        and all(
            _str(i[k]) for k in ("version", "implementation", "executable", "prefix", "base_prefix")
        )
        and _str(i["os"])
        and _str(i["machine"])
        and _bool(i["is_venv"])
        and _opt_str(i["libc"])
        and _strs(i["site_packages"])
        and type(i["markers"]) is dict
        and all(type(k) is str and type(v) is str for k, v in i["markers"].items())
    )


def _packages(packages: object) -> bool:
    if type(packages) is not list:
        return False
    seen: set[str] = set()
    for p in packages:
        if not (
            _keys(p, _PACKAGE)
            and all(_str(p[k]) for k in ("name", "display_name", "location"))
            and _bounded(p["version"], _MAX_VERSION)
            and _opt_str(p["installer"])
            and _opt_str(p["fingerprint"])
            and _bool(p["requested"])
            and _bool(p["shadowed"])
            and _requires(p["requires"])
            and _source_fits(p["source"])
        ):
            return False
        if not p["shadowed"]:
            if p["name"] in seen:
                return False  # the model refuses two entries for one package: it says so
            seen.add(p["name"])
    return True


def _requires(requires: object) -> bool:
    return (
        type(requires) is list
        and len(requires) <= _MAX_REQUIRES
        and all(_line(r) and _bounded(r, _MAX_REQUIREMENT) for r in requires)
    )


def _source_fits(s: object) -> bool:
    return (
        _keys(s, _SOURCE)
        and isinstance(s, dict)
        and s["kind"] in ("index", "url", "vcs", "dir", "editable")
        and all(_opt_str(v) for k, v in s.items() if k != "kind")
    )


def _torch(t: object) -> bool:
    return (
        _keys(t, _TORCH)
        and isinstance(t, dict)
        and _bounded(t["version"], _MAX_VERSION)
        and (t["debug"] is None or _bool(t["debug"]))
        and all(_opt_str(v) for k, v in t.items() if k not in ("version", "debug"))
    )


def _accelerator(a: object) -> bool:
    return (
        _keys(a, _ACCELERATOR)
        and isinstance(a, dict)
        and _bool(a["present"])
        and _int(a["count"])
        and _strs(a["gpus"])
        and all(_opt_str(a[k]) for k in ("driver", "nvcc", "source"))
    )


def _live_only(item: object, fields: frozenset[str], section: str) -> bool:
    """``item`` has ``fields``, and perhaps what a live side carries (one line or a path)."""
    if type(item) is not dict:
        return False
    extra = item.keys() - fields
    return (
        fields <= item.keys()
        and extra <= set(LIVE_ONLY[section])
        and all(_line(item[k]) if k == "error" else _opt_str(item[k]) for k in extra)
    )


def _repo_fits(r: object) -> bool:
    return (
        _live_only(r, _REPO, "repos")
        and isinstance(r, dict)
        and _str(r["path"])
        and _bool(r["dirty"])
        and _int(r["untracked"])
        and all(_opt_str(r[k]) for k in ("head", "branch", "diff_sha256", "remote"))
    )


def _file_fits(f: object) -> bool:
    return (
        _live_only(f, _FILE, "files")
        and isinstance(f, dict)
        and _str(f["path"])
        and (f["sha256"] is None or (_str(f["sha256"]) and bool(_SHA256.fullmatch(f["sha256"]))))
        and (f["size"] is None or _int(f["size"]))
        and _opt_str(f["root"])
        and _opt_str(f["rel"])
    )


def _cache_fits(c: object) -> bool:
    return (
        _live_only(c, _CACHE, "caches")
        and isinstance(c, dict)
        and _str(c["kind"])
        and _str(c["path"])
        and _bool(c["exists"])
        and _bool(c["readable"])
        and _int(c["bytes"])
        and _int(c["files"])
        and c["archive"] is None
        and (c["newest_mtime"] is None or _finite_float(c["newest_mtime"]))
    )


def _finite_float(value: object) -> bool:
    # The model makes an int a float (5 -> 5.0): only a float is taken unchanged.
    return type(value) is float and value == value and value not in (_INF, -_INF)


# ---- typed(): the model of a document ------------------------------------------------------

# Building a model directly costs about 10 us a package more than pydantic's validation,
# whose validators cost about 35 ms to build, once per process (pydantic's plugin loader
# imports importlib.metadata on the way): a process that reads one or two snapshots (diff,
# check, show) builds its models directly; one that reads many (fleet) builds the
# validators once this budget of packages is spent.
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

    if type(doc) is dict and type(doc.get("packages")) is list and building_directly():
        size = len(doc["packages"])
        if _spent[0] + size > _DIRECT_PACKAGES:
            _spent[0] = _DIRECT_PACKAGES  # spent: from here on, the validators
        elif fits(doc):
            _spent[0] += size
            return built(doc)
    return Snapshot.model_validate(doc)


def built(doc: Document) -> Snapshot:
    """The model of a document fits() vouched for, without validation: each field as the
    model's validation makes it (tuples, a datetime, nested models)."""
    from pydantic_core import TzInfo

    from envguard.snapshots import models as m

    interpreter = doc["interpreter"]
    accelerator = doc["accelerator"]
    return m.Snapshot.model_construct(
        **{
            **doc,
            # UTC as pydantic's validation gives it (the same time either way; the same repr).
            "created": datetime.fromisoformat(doc["created"][:-1]).replace(tzinfo=TzInfo(0)),
            "command": tuple(doc["command"]),
            "metrics": dict(doc["metrics"]),
            "interpreter": m.Interpreter.model_construct(
                **{
                    **interpreter,
                    "site_packages": tuple(interpreter["site_packages"]),
                    "markers": dict(interpreter["markers"]),
                }
            ),
            "packages": tuple(
                m.Package.model_construct(
                    **{
                        **p,
                        "source": m.Source.model_construct(**p["source"]),
                        "requires": tuple(p["requires"]),
                    }
                )
                for p in doc["packages"]
            ),
            "torch": None if doc["torch"] is None else m.TorchBuild.model_construct(**doc["torch"]),
            "accelerator": m.Accelerator.model_construct(
                **{**accelerator, "gpus": tuple(accelerator["gpus"])}
            ),
            "repos": tuple(m.Repo.model_construct(**r) for r in doc["repos"]),
            "files": tuple(m.FileDigest.model_construct(**f) for f in doc["files"]),
            "caches": tuple(m.Cache.model_construct(**c) for c in doc["caches"]),
            "env": dict(sorted(doc["env"].items())),  # as the model's redact_env sorts it
            "warnings": tuple(doc["warnings"]),
        }
    )
