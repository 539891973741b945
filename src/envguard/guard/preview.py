"""A dry run as envguard drift: the environment the install would leave, compared with the
snapshot by the one engine under the one policy, and what of it stops the install."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from envguard.compare.models import Change, Drift, primary_changes
from envguard.compare.severity import Severity
from envguard.guard.resolve import Planned, Resolution
from envguard.snapshots.models import Package, Snapshot, Source, TorchBuild

if TYPE_CHECKING:
    from envguard.compare.policy import Policy

# What an install does to what was there: these stop it at --fail-on. An added package is
# what an install is for; it is counted and shown, never a reason to refuse by itself.
CHANGING = frozenset(
    {"removed", "upgraded", "downgraded", "variant_changed", "version_changed", "source_changed"}
)


def after_install(
    baseline: Snapshot, live: Snapshot, resolution: Resolution, *, tool: str
) -> Snapshot:
    """``baseline`` with the packages the install touches as it would leave them: the
    drift from ``baseline`` is the install's alone (what else moved since is `diff`'s)."""
    touched = resolution.touched()
    live_map = live.package_map()
    site = next(iter(live.interpreter.site_packages), live.interpreter.prefix)
    kept = [p for p in baseline.packages if p.name not in touched]
    added = _with_requires(resolution)
    for planned in added:
        was = live_map.get(planned.name)
        kept.append(
            Package.model_construct(
                name=planned.name,
                display_name=was.display_name if was is not None else planned.name,
                version=planned.version,
                installer=tool,
                requested=planned.requested or (was is not None and was.requested),
                location=was.location if was is not None else site,
                source=Source.model_construct(),
                fingerprint=None,
                shadowed=False,
                requires=planned.requires,
            )
        )
    torch = baseline.torch
    if "torch" in touched:
        now = next((p.version for p in added if p.name == "torch"), None)
        torch = _torch_build(now)
    return baseline.model_copy(
        update={
            "name": "after the install",
            "packages": tuple(sorted(kept, key=lambda p: (p.name, p.shadowed))),
            "torch": torch,
            "metrics": {},
        }
    )


def _with_requires(resolution: Resolution) -> tuple[Planned, ...]:
    """The planned packages; when the installer did not say what requires what (uv's dry
    run) and the command named one package, that package pulled in the rest."""
    planned = resolution.installed
    roots = [p for p in planned if p.requested]
    if resolution.requires_known or len(roots) != 1:
        return planned
    root = roots[0]
    others = tuple(p.name for p in planned if p is not root)
    return tuple(
        Planned(name=p.name, version=p.version, requires=others, requested=True) if p is root else p
        for p in planned
    )


def _torch_build(version: str | None) -> TorchBuild | None:
    """torch's build as far as its version says (+cu128 is CUDA 12.8; +cpu none)."""
    if version is None:
        return None
    match = re.search(r"\+cu(\d+)(\d)$", version)
    if match:
        return TorchBuild.model_construct(version=version, cuda=f"{match[1]}.{match[2]}")
    if version.endswith("+cpu"):
        return TorchBuild.model_construct(version=version, cuda=None)
    return None  # a wheel without a label (PyPI's): its build is known once installed


def blocking(drift: Drift, policy: Policy, *, allowed: Iterable[str]) -> list[Change]:
    """The changes that stop the install: to what was there, or a pair of packages that
    move together left split, at ``policy.fail_on`` or above, and not allowed by name."""
    from packaging.utils import canonicalize_name

    level = policy.fail_on
    if level is None:
        return []
    allow = {canonicalize_name(a) for a in allowed}
    return [
        c
        for c in drift.changes
        if c.severity.rank >= level.rank
        and (
            (c.section == "packages" and c.kind in CHANGING and c.name not in allow)
            # A pair the install would leave split (siblings.py), unless one is allowed.
            or (c.section == "siblings" and c.kind == "split" and not allow & set(c.name.split()))
        )
    ]


def headline(drift: Drift, *, lead: str, removes: Mapping[str, str] | None = None) -> str:
    """``this install would change torch 2.13.0+cpu -> 2.14.1 (critical, pulled in by
    sglang), add 172 packages, downgrade 5`` (``lead``: "this install would"), or that it
    changes no package. ``removes`` (name: version) is what the installer itself says it
    removes: each is named, whatever the drift from the snapshot says (a package the good
    snapshot never had is no drift, but the user still loses it)."""
    by_name = primary_changes(drift.changes)
    removes = dict(removes or {})
    if not by_name and not removes:
        return f"{lead} change no package".strip() if lead else "no package change"
    # The GPU stack's changes by name, torch and changed versions before removals.
    named = sorted(
        (c for c in by_name.values() if c.severity is Severity.critical and c.kind in CHANGING),
        key=lambda c: (c.name != "torch", c.kind == "removed", c.name),
    )
    parts = [_named(c) for c in named[:3]]
    if len(named) > 3:
        parts.append(f"{len(named) - 3} more of the GPU stack")
    for change in named:
        if change.kind == "removed":
            removes.pop(change.name, None)  # named above, with why
    counted = Counter(
        c.kind
        for c in by_name.values()
        if c not in named and not (c.kind == "removed" and c.name in removes)
    )
    for kind, verb in (
        ("added", "add"),
        ("upgraded", "upgrade"),
        ("downgraded", "downgrade"),
        ("variant_changed", "change the build of"),
        ("version_changed", "change"),
        ("source_changed", "change the source of"),
        ("removed", "remove"),
    ):
        n = counted.get(kind, 0)
        if n:
            parts.append(f"{verb} {n} package{'s' if n != 1 else ''}")
    if removes:
        parts.append("remove " + ", ".join(f"{n} {v}" for n, v in sorted(removes.items())))
    return f"{lead} {', '.join(parts)}".strip()


def _named(change: Change) -> str:
    why = ["critical"]
    if change.groups:
        why.append("pulled in by " + ", ".join(change.groups))
    if change.kind == "removed":
        return f"remove {change.name} {change.expected} ({', '.join(why)})"
    return f"change {change.name} {change.expected} -> {change.actual} ({', '.join(why)})"
