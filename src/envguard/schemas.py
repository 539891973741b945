"""The published JSON schemas: snapshots (the files envguard writes) and the documents that
`--format json` prints (drift, fleet, ..., guard's). `envguard schema KIND` prints one;
`schema/*.json` in the repository holds the same text, checked by a test."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter
from typing_extensions import NotRequired, TypedDict

KINDS = (
    "snapshot",
    "drift",
    "fleet",
    "plan",
    "list",
    "log",
    "restore",
    "bisect",
    "guard",
    "history",
    "undo",
    "protect",
    "fit",
)


class ChangeDocument(TypedDict):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    section: str
    kind: str
    name: str
    expected: str | None
    actual: str | None
    severity: Literal["critical", "warning", "info"]
    message: str
    file: str | None
    line: int | None
    groups: list[str]
    # Where a lock installs the package (a lock change); absent in documents from before.
    scope: NotRequired[list[str]]


class GroupDocument(TypedDict):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    root: str
    members: list[str]


class DriftDocument(TypedDict):
    """`envguard diff|check --format json`."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    schema: Literal["envguard.drift"]
    schema_version: Literal[1]
    drift: bool
    max_severity: Literal["critical", "warning", "info"] | None
    expected: str | None
    actual: str | None
    subject: str | None
    changes: list[ChangeDocument]
    metrics: dict[str, float | int | str | bool | None]
    notes: list[str]
    verdict: list[str]
    groups: list[GroupDocument]


class FleetValueDocument(TypedDict):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    value: str
    hosts: list[str]
    odd: bool


class FleetItemDocument(TypedDict):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    item: str
    values: list[FleetValueDocument]


class FleetFailureDocument(TypedDict):
    """A host with no environment to compare, and why (no report, a broken one)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    host: str
    reason: str


class FleetGroupDocument(TypedDict):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    fingerprint: str
    hosts: list[str]


class FleetDocument(TypedDict):
    """`envguard fleet --format json`."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    schema: Literal["envguard.fleet"]
    schema_version: Literal[1]
    agree: bool
    hosts: list[str]
    baseline: str | None
    groups: list[FleetGroupDocument]
    differences: list[FleetItemDocument]
    odd_hosts: list[str]
    failed: list[FleetFailureDocument]


class ListedDocument(TypedDict, total=False):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    path: str
    name: str
    created: str
    torch: str | None
    packages: int
    metrics: dict[str, float | int | str | bool | None]
    error: str


class ListDocument(TypedDict):
    """`envguard list --format json`."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    schema: Literal["envguard.list"]
    schema_version: Literal[1]
    snapshots: list[ListedDocument]


class LoggedDocument(TypedDict, total=False):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    path: str
    name: str
    created: str | None
    torch: str | None
    packages: int
    metrics: dict[str, float | int | str | bool | None]
    # What changed since the snapshot before it, in one line ("" for the first).
    change: str
    error: str


class LogDocument(TypedDict):
    """`envguard log --format json`: oldest first, unreadable files last."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    schema: Literal["envguard.log"]
    schema_version: Literal[1]
    snapshots: list[LoggedDocument]


class UnfitDocument(TypedDict):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    path: str
    dist: str | None
    message: str
    missing: list[str]
    versions: list[str]
    symbols: list[str]
    symbol_count: int
    symbols_from: str | None


class FitDocument(TypedDict):
    """`envguard fit --format json`."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    schema: Literal["envguard.fit"]
    schema_version: Literal[1]
    loads: bool
    checked: int
    broken: list[UnfitDocument]
    # "x.so has no kernel for sm_90 (...)": an extension with no kernel for this node's GPU.
    no_kernel: list[str]
    warnings: list[str]


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``kind``: one of KINDS."""
    if kind == "snapshot":
        from envguard.snapshots import models

        # Defaults made with model_construct() hold deferred models whose serializer is a
        # placeholder until the class is built; pydantic before 2.14 cannot then encode
        # them as the schema's defaults.
        for model in (models.Source, models.Accelerator, models.Snapshot):
            model.model_rebuild(force=True)
        found = models.Snapshot.model_json_schema(mode="validation")
    elif kind == "drift":
        found = TypeAdapter(DriftDocument).json_schema()
    elif kind == "fleet":
        found = TypeAdapter(FleetDocument).json_schema()
    elif kind == "plan":
        from envguard.recovery.plan import Plan

        found = Plan.model_json_schema(mode="serialization", by_alias=True)
    elif kind == "list":
        found = TypeAdapter(ListDocument).json_schema()
    elif kind == "log":
        found = TypeAdapter(LogDocument).json_schema()
    elif kind == "restore":
        from envguard.recovery.outcome import RestoreReport

        found = RestoreReport.model_json_schema(mode="serialization", by_alias=True)
    elif kind == "bisect":
        from envguard.recovery.bisect import BisectReport

        found = TypeAdapter(BisectReport).json_schema(mode="serialization")
    elif kind == "fit":
        found = TypeAdapter(FitDocument).json_schema()
    elif kind in ("guard", "history", "undo", "protect"):
        from envguard.guard import report

        documents: dict[str, type[BaseModel]] = {
            "guard": report.GuardReport,
            "history": report.HistoryReport,
            "undo": report.UndoReport,
            "protect": report.ProtectReport,
        }
        found = documents[kind].model_json_schema(mode="serialization", by_alias=True)
    else:
        raise ValueError(kind)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"envguard.{kind}.v1.json",
        **found,
    }


def schema_text(kind: str) -> str:
    return json.dumps(schema(kind), indent=2, sort_keys=True) + "\n"
