"""What bisect can apply: the drift from the good snapshot to the bad one as units (the
torch stack, each install with what it pulled in, each other package change, the
variables, a kept compile cache), and a candidate snapshot built from some of them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from envguard.compare.sections.env import own_change
from envguard.compare.sections.packages import torch_version
from envguard.snapshots.models import Package, Snapshot

# The torch stack moves together: its builds pin each other's CUDA libraries.
_TORCH = frozenset({"torch", "torchvision", "torchaudio", "triton", "pytorch-triton"})


@dataclass(frozen=True)
class Unit:
    """One thing bisect can apply: some packages taken from the bad side, or its variables."""

    id: str
    label: str
    packages: tuple[str, ...] = ()
    env: bool = False
    cache: str | None = None  # a kept compile cache's kind: applied, the run starts cold


# The variable each kept cache kind is pointed at for a run.
CACHE_VARIABLES = {"inductor": "TORCHINDUCTOR_CACHE_DIR", "triton": "TRITON_CACHE_DIR"}


def _differs(a: Package | None, b: Package | None) -> bool:
    if a is None or b is None:
        return a is not b
    return (a.version, a.source, a.fingerprint) != (b.version, b.source, b.fingerprint)


def _change(name: str, before: str | None, after: str | None) -> str:
    """``numpy 2.1.0 -> 1.26.4``, ``six added (1.17.0)``, ``x removed (was 1)``."""
    if before is None:
        return f"{name} added ({after or '?'})"
    if after is None:
        return f"{name} removed (was {before})"
    return f"{name} {before} -> {after}"


def _version(package: Package | None) -> str | None:
    return package.version if package is not None else None


def units(good: Snapshot, bad: Snapshot) -> list[Unit]:
    """The drift from ``good`` to ``bad`` as bisect units, largest cause first."""
    from envguard.compare.causes import group_changes

    gm, bm = good.package_map(), bad.package_map()
    changed = {n for n in gm.keys() | bm.keys() if _differs(gm.get(n), bm.get(n))}
    causes = group_changes(bad, changed)
    out: list[Unit] = []
    torch = sorted(n for n in changed if n in _TORCH or n.startswith("nvidia-"))
    if torch:
        # Named by torch's own change (its build label says the CUDA line) and by the
        # installs that pulled it in: what a person acts on.
        label = f"the torch stack ({len(torch)} packages)"
        if "torch" in torch:
            # Named by its builds, as diff names it (PyPI's 2.14.1 is +cu130).
            label = _change("torch", torch_version(good), torch_version(bad))
            if len(torch) > 1:
                label += f" with {len(torch) - 1} more of its stack"
        by = sorted(c.root for c in causes if c.root not in torch and set(torch) & {*c.members})
        if by:
            label += f", pulled in by {', '.join(by)}"
        out.append(Unit(id="torch", label=label, packages=tuple(torch)))
    unit_of = dict.fromkeys(torch, "the torch stack's")
    # Biggest install first (the verdict's order): a package two installs pulled in goes
    # with the bigger one, as the diff's table folds it.
    for cause in sorted(causes, key=lambda c: (-len(c.members), c.root)):
        members = [m for m in (cause.root, *cause.members) if m not in unit_of]
        if cause.root in unit_of or len(members) < 2:
            continue  # nothing left that it alone pulled in: a single change below
        unit_of.update(dict.fromkeys(members, f"{cause.root}'s"))
        out.append(
            Unit(
                id=f"group:{cause.root}",
                label=_group_label(cause.root, cause.members, unit_of),
                packages=tuple(members),
            )
        )
    taken = set(unit_of)
    for name in sorted(changed - taken):
        what = _change(name, _version(gm.get(name)), _version(bm.get(name)))
        out.append(Unit(id=f"package:{name}", label=what, packages=(name,)))
    # As the diff's env section tells drift: not what only one run's own process changed
    # after it started (a candidate's run changes it again).
    if any(
        name != "VIRTUAL_ENV"
        and good.env.get(name) != bad.env.get(name)
        and not own_change(good, bad, name)
        for name in good.env.keys() | bad.env.keys()
    ):
        out.append(Unit(id="env", label="the environment variables", env=True))
    now = {c.kind: c for c in bad.caches}
    for kept in good.caches:
        if kept.archive is None or kept.kind not in CACHE_VARIABLES:
            continue
        live = now.get(kept.kind)
        if live is None or (live.files, live.bytes) != (kept.archive.files, kept.archive.bytes):
            label = f"a cold {kept.kind} cache (the good run's was warm)"
            out.append(Unit(id=f"cache:{kept.kind}", label=label, cache=kept.kind))
    return out


def _group_label(root: str, members: Sequence[str], unit_of: dict[str, str]) -> str:
    """``sglang and what it pulled in (133 of its 135 packages; 2 in the torch stack's
    unit)``: the install's whole count, as the diff's verdict gives it, and where the
    packages that went with another unit are."""
    n = len(members)
    whole = f"{n} package{'s' * (n != 1)}"
    mine = unit_of[root]
    apart = Counter(unit_of[m] for m in members if unit_of[m] != mine)
    if not apart:
        return f"{root} and what it pulled in ({whole})"
    where = ", ".join(f"{k} in {unit} unit" for unit, k in sorted(apart.items()))
    return f"{root} and what it pulled in ({n - sum(apart.values())} of its {whole}; {where})"


def candidate(good: Snapshot, bad: Snapshot, chosen: Sequence[Unit]) -> Snapshot:
    """``good`` with the ``chosen`` units taken from ``bad``."""
    packages = {p.name: p for p in good.packages if not p.shadowed}
    bm = bad.package_map()
    names = {n for u in chosen for n in u.packages}
    for name in names:
        if name in bm:
            packages[name] = bm[name]
        else:
            packages.pop(name, None)
    update: dict[str, object] = {"packages": tuple(sorted(packages.values(), key=lambda p: p.name))}
    if "torch" in names:
        update["torch"] = bad.torch
    if any(u.env for u in chosen):
        update["env"], update["env_at_start"] = bad.env, bad.env_at_start
    return good.model_copy(update=update)


def group_parts(group: Unit, good: Snapshot, bad: Snapshot) -> list[Unit]:
    """An install's group (``group:ROOT``) as one unit per package, each labelled with
    its change and, past the root, the install that pulled it in."""
    root = group.id.removeprefix("group:")
    gm, bm = good.package_map(), bad.package_map()
    out = []
    for name in group.packages:
        label = _change(name, _version(gm.get(name)), _version(bm.get(name)))
        label += "" if name == root else f", pulled in by {root}"
        out.append(Unit(id=f"package:{name}", label=label, packages=(name,)))
    return out
