"""envguard's operations as typed Python functions: what the CLI, the tests and your own
scripts call.

Each function takes plain arguments and returns a model (Snapshot, Drift, Plan, Outcome,
FleetReport; snapshot_document() the JSON document a snapshot file holds); none prints and
none exits. Failures raise EnvguardError (``.message``, ``.hint``, ``.exit_code``).

    import envguard

    snap = envguard.snapshot(name="good", metrics={"tok_s": 21500})
    envguard.save(snap)
    drift = envguard.diff("good")          # the live environment against the snapshot
    if drift.reaches(envguard.Severity.warning): ...

The operations live in one module per kind of work (capture, records, compare, recover,
restoration, bisection, hosts, guarding, undoing) and are re-exported here, each module loaded when
one of its names is first used: `envguard snapshot` loads the capture module and nothing of
restore's. Heavy modules (pydantic, rich, git) load inside the functions.
"""

from __future__ import annotations

# typing is not imported: this package is on the way to the early probe's start (api.early),
# and what that start need not import waits until the probe runs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from envguard.api.bisection import BisectOptions, bisect
    from envguard.api.capture import (
        Measure,
        check_writable,
        default_path,
        fit,
        list_snapshots,
        load,
        newest,
        save,
        snapshot,
        snapshot_document,
        start_document,
    )
    from envguard.api.compare import check, diff, diff_locks, diff_result, find_lock, load_policy
    from envguard.api.early import prestart
    from envguard.api.guarding import Guarded, GuardOptions, Preview, guard, preview
    from envguard.api.hosts import fleet, probe_payload, restore_hosts, snapshot_hosts
    from envguard.api.records import keep, log
    from envguard.api.recover import (
        RebuildOptions,
        export,
        plan_rebuild,
        rebuild,
        run_then,
        sources,
        warm,
    )
    from envguard.api.restoration import RestoreOptions, restore, restore_env
    from envguard.api.undoing import (
        Undone,
        history,
        history_report,
        protect,
        protection,
        protection_report,
        undo,
        unprotect,
    )

# Each module and the names it exports.
_MODULES = {
    "bisection": ("BisectOptions", "bisect"),
    "capture": (
        "Measure",
        "check_writable",
        "default_path",
        "fit",
        "list_snapshots",
        "load",
        "newest",
        "save",
        "snapshot",
        "snapshot_document",
        "start_document",
    ),
    "compare": ("check", "diff", "diff_locks", "diff_result", "find_lock", "load_policy"),
    "early": ("prestart",),
    "guarding": ("GuardOptions", "Guarded", "Preview", "guard", "preview"),
    "undoing": (
        "Undone",
        "history",
        "history_report",
        "protect",
        "protection",
        "protection_report",
        "undo",
        "unprotect",
    ),
    "hosts": ("fleet", "probe_payload", "restore_hosts", "snapshot_hosts"),
    "records": ("keep", "log"),
    "recover": (
        "RebuildOptions",
        "export",
        "plan_rebuild",
        "rebuild",
        "run_then",
        "sources",
        "warm",
    ),
    "restoration": ("RestoreOptions", "restore", "restore_env"),
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "BisectOptions",
    "GuardOptions",
    "Guarded",
    "Measure",
    "Preview",
    "RebuildOptions",
    "RestoreOptions",
    "Undone",
    "bisect",
    "check",
    "check_writable",
    "default_path",
    "diff",
    "diff_locks",
    "diff_result",
    "export",
    "find_lock",
    "fit",
    "fleet",
    "guard",
    "history",
    "history_report",
    "keep",
    "list_snapshots",
    "load",
    "load_policy",
    "log",
    "newest",
    "plan_rebuild",
    "prestart",
    "preview",
    "probe_payload",
    "protect",
    "protection",
    "protection_report",
    "rebuild",
    "restore",
    "restore_env",
    "restore_hosts",
    "run_then",
    "save",
    "snapshot",
    "snapshot_document",
    "snapshot_hosts",
    "sources",
    "start_document",
    "undo",
    "unprotect",
    "warm",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'envguard.api' has no attribute {name!r}")
    # __import__, not importlib.import_module: the import statement's path, which
    # `python -X importtime` sees (it is blind to import_module's).
    module = __import__(f"{__name__}.{_HOME[name]}", fromlist=[name])
    value = getattr(module, name)
    globals()[name] = value  # found once: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
