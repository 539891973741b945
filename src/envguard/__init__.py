"""envguard: snapshot, diff and rebuild ML training environments.

The operations are in :mod:`envguard.api` and re-exported here (loaded on first use, so
``import envguard`` stays cheap): ``envguard.snapshot()``, ``envguard.diff()``, ...
"""

from __future__ import annotations

from envguard.version import SCHEMA_VERSION, __version__

# typing is not imported: ``envguard snapshot`` and ``envguard diff`` start their probe before
# anything they need only later loads (envguard.api.early).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from envguard.api import (
        check,
        diff,
        export,
        fleet,
        list_snapshots,
        load,
        load_policy,
        newest,
        plan_rebuild,
        rebuild,
        run_then,
        save,
        snapshot,
        snapshot_document,
        snapshot_hosts,
        sources,
    )
    from envguard.compare.models import Change, Drift, FleetReport, Severity
    from envguard.errors import EnvguardError
    from envguard.recovery.plan import Plan
    from envguard.snapshots.models import Snapshot

_MODELS = {
    "Change": "envguard.compare.models",
    "Drift": "envguard.compare.models",
    "FleetReport": "envguard.compare.models",
    "Severity": "envguard.compare.models",
    "EnvguardError": "envguard.errors",
    "Plan": "envguard.recovery.plan",
    "Snapshot": "envguard.snapshots.models",
}
__all__ = [
    "SCHEMA_VERSION",
    "Change",
    "Drift",
    "EnvguardError",
    "FleetReport",
    "Plan",
    "Severity",
    "Snapshot",
    "__version__",
    "check",
    "diff",
    "export",
    "fleet",
    "list_snapshots",
    "load",
    "load_policy",
    "newest",
    "plan_rebuild",
    "rebuild",
    "run_then",
    "save",
    "snapshot",
    "snapshot_document",
    "snapshot_hosts",
    "sources",
]


def __getattr__(name: str) -> Any:
    # Asked for every submodule imported as `from envguard import x` before it loads (the
    # console entry's prestart among them): importlib is loaded only for a name of ours.
    if name in _MODELS:
        import importlib

        return getattr(importlib.import_module(_MODELS[name]), name)
    if name in __all__ and not name.startswith(("_", "SCHEMA")):  # the operations
        import importlib

        return getattr(importlib.import_module("envguard.api"), name)
    raise AttributeError(f"module 'envguard' has no attribute {name!r}")
