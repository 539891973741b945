"""A dry run as envguard drift: the environment the install would leave, compared with the
snapshot by the one engine under the one policy, and what of it stops the install."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from envguard.compare.models import Change, Drift, primary_changes
from envguard.compare.sections.torch import BUILD_FIELDS
from envguard.compare.severity import Severity
from envguard.guard.resolve import Planned, Resolution
from envguard.snapshots.models import Package, Snapshot, Source, TorchBuild

if TYPE_CHECKING:
    from envguard.compare.policy import Policy

# What an install does to what was there: these stop it at --fail-on. An added package is
# what an install is for; it is counted and shown, never a reason to refuse by itself.
CHANGING = frozenset(
    {
        "removed",
        "upgraded",
        "downgraded",
        "variant_changed",
        "version_changed",
        "source_changed",
        "content_changed",
    }
)
# What the install would leave unable to run (compare/sections/fit.py): stops it too.
UNFIT = frozenset({"unfit", "driver", "arch"})
# A file of a distribution the install keeps, written over by an incoming wheel, or a
# shared file whose owner it changes (compare/sections/installed.py): stops it too.
CLOBBERING = frozenset({"clash", "owner_changed"})


def after_install(
    baseline: Snapshot,
    live: Snapshot,
    resolution: Resolution,
    *,
    tool: str,
    would: Snapshot | None = None,
) -> Snapshot:
    """``baseline`` with the packages the install touches as it would leave them: the
    drift from ``baseline`` is the install's alone (what else moved since is `diff`'s).
    ``would``: the venv measured with the incoming wheels unpacked ahead of it; each
    package it brings is then its files (a same-version rebuild differs), torch's build is
    what its version.py says, and the fit is of the would-be venv."""
    touched = resolution.touched()
    live_map = live.package_map()
    brought = would.package_map() if would is not None else {}
    site = next(iter(live.interpreter.site_packages), live.interpreter.prefix)
    kept = [p for p in baseline.packages if p.name not in touched]
    added = _with_requires(resolution)
    for planned in added:
        was = live_map.get(planned.name)
        read = brought.get(planned.name)
        if read is not None and read.version == planned.version:
            kept.append(
                read.model_copy(
                    update={
                        "requested": planned.requested or (was is not None and was.requested),
                        "location": was.location if was is not None else site,
                        # How the scratch copy was unpacked (by URL, for pip's) is not
                        # where the install takes it from: as before, the index.
                        "source": Source.model_construct(),
                        "requires": planned.requires or read.requires,
                    }
                )
            )
            continue
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
        # PyPI's CUDA wheel is 2.14.1 by name and 2.14.1+cu130 by its version.py.
        built = would.torch if would is not None else None
        if (
            built is not None
            and now is not None
            and built.version.split("+")[0] == now.split("+")[0]
        ):
            torch = built
    update: dict[str, object] = {
        "name": "after the install",
        "packages": tuple(sorted(kept, key=lambda p: (p.name, p.shadowed))),
        "torch": torch,
        "metrics": {},
    }
    if would is not None and would.fit is not None:
        update["fit"] = would.fit
    if would is not None and would.clashes is not None:
        # an incoming wheel's file over one a distribution the install keeps claims
        update["clashes"] = would.clashes
    return baseline.model_copy(update=update)


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


def blocking(
    drift: Drift,
    policy: Policy,
    *,
    allowed: Iterable[str],
    owners: Mapping[str, str] | None = None,
) -> list[Change]:
    """The changes that stop the install: to what was there, a pair of packages that move
    together left split, an extension left unable to load, or another distribution's file
    written over, at ``policy.fail_on`` or above, and not allowed by name (``owners``, path
    -> canonical name: an extension by its package's, a file by the incoming package that
    writes it: allowing the one whose file is written over allows nothing)."""
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
            # An extension the install would leave unable to load (or run on the GPU).
            or (c.section == "fit" and c.kind in UNFIT and (owners or {}).get(c.name) not in allow)
            # A pair the install would leave split (siblings.py), unless one is allowed.
            or (c.section == "siblings" and c.kind == "split" and not allow & set(c.name.split()))
            # A file two distributions would claim, the one left on disk changed.
            or (
                c.section == "installed"
                and c.kind in CLOBBERING
                and (owners or {}).get(c.name) not in allow
            )
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
    unfit = [
        c.message.replace(" cannot load: ", " unable to load: ", 1)
        for c in drift.changes
        if c.section == "fit" and c.kind == "unfit" and c.severity is Severity.critical
    ]
    leave = [f"leave {m}" for m in unfit[:2]]
    if len(unfit) > 2:
        leave.append(f"leave {len(unfit) - 2} more extensions unable to load")
    if not by_name and not removes:
        if leave:
            return f"{lead} {', '.join(leave)}".strip()
        return f"{lead} change no package".strip() if lead else "no package change"
    # The GPU stack's changes by name, torch and changed versions before removals.
    named = sorted(
        (c for c in by_name.values() if c.severity is Severity.critical and c.kind in CHANGING),
        key=lambda c: (c.name != "torch", c.kind == "removed", c.name),
    )
    builds = {
        c.name: f"{BUILD_FIELDS.get(c.kind, c.kind)} {c.expected or 'none'} -> {c.actual or 'none'}"
        for c in drift.changes
        if c.section == "torch" and c.kind in BUILD_FIELDS
    }
    parts = [*leave, *(_named(c, build=builds) for c in named[:3])]
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
        ("content_changed", "swap the files of"),
        ("removed", "remove"),
    ):
        n = counted.get(kind, 0)
        if n:
            parts.append(f"{verb} {n} package{'s' if n != 1 else ''}")
    if removes:
        parts.append("remove " + ", ".join(f"{n} {v}" for n, v in sorted(removes.items())))
    return f"{lead} {', '.join(parts)}".strip()


def _named(change: Change, *, build: dict[str, str]) -> str:
    why = ["critical"]
    if change.groups:
        why.append("pulled in by " + ", ".join(change.groups))
    if change.kind == "removed":
        return f"remove {change.name} {change.expected} ({', '.join(why)})"
    if change.kind == "content_changed":
        # torch's build as its version.py says (CUDA 12.8 -> 13.0), else its files differ.
        said = build.get("cuda") if change.name == "torch" else None
        why.insert(0, said or "other files")
        # The message begins "torch 2.11.0+cu128: same version, different files".
        head = change.message.split(":", 1)[0]
        named = head if head.startswith(change.name + " ") else change.name
        return f"swap {named} for another build of the same version ({', '.join(why)})"
    return f"change {change.name} {change.expected} -> {change.actual} ({', '.join(why)})"
