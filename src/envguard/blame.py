"""Who the rank gate blames, in the one line every rank says: the odd nodes against the
majority, both sides when there is none (two nodes, or any tie), the nodes that differ from
a snapshot when one is asked for, and the node of each rank that never came.

Pure functions over what the ranks published; distributed.py does the exchanging.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_GROUPS = 3  # odd groups whose difference is spelled out; the rest are only named
_MAX_ITEMS = 6  # differences said per group


def _absent(value: object) -> str:
    return "(absent)" if value is None else str(value)


@dataclass(frozen=True)
class Difference:
    """One way a rank differs from the reference: the section of a snapshot diff it belongs
    to and its kind there (so the one policy weighs it as ``check`` does: see
    compare/layers.py), what it is about, and the short phrase every rank says."""

    section: str
    kind: str
    name: str
    text: str
    # The two values, where the policy weighs them (a package's versions: upgraded,
    # downgraded, a different build; python's: a different minor version or not).
    values: tuple[str, str] | None = None


def _packages(ref: Mapping[str, Any], pkgs: Mapping[str, Any]) -> list[Difference]:
    out = []
    for name in sorted(set(ref) | set(pkgs)):
        before, after = ref.get(name), pkgs.get(name)
        if before is None or after is None:
            kind = "added" if before is None else "removed"
            text = f"{name} {_absent(before and before[0])} -> {_absent(after and after[0])}"
            out.append(Difference("packages", kind, name, text))
        elif before[0] != after[0]:
            text, versions = f"{name} {before[0]} -> {after[0]}", (str(before[0]), str(after[0]))
            out.append(Difference("packages", "version_changed", name, text, versions))
        elif before[1] != after[1] and before[1] and after[1]:
            text = f"{name} {after[0]}: installed files differ (RECORD)"
            out.append(Difference("packages", "content_changed", name, text))
    return out


_ON_DISK = (
    ("modified", "modified_in_place", "edited in place"),
    ("missing", "files_missing", "missing"),
    ("added", "files_added", "not in RECORD"),
)


def _installed(ref: Mapping[str, Any], now: Mapping[str, Any]) -> list[Difference]:
    """Installed files that are not what RECORD says on one side and are on the other."""
    out = []
    for name in sorted(set(ref) | set(now)):
        before, after = ref.get(name) or {}, now.get(name) or {}
        for key, kind, what in _ON_DISK:
            was, new = before.get(key) or [], after.get(key) or []
            if sorted(was) == sorted(new):
                continue
            paths = sorted(set(new) - set(was)) or sorted(set(was) - set(new))
            where = "here" if set(new) - set(was) else "on the reference"
            shown = ", ".join(str(p) for p in paths[:2]) + (", ..." if len(paths) > 2 else "")
            out.append(Difference("installed", kind, name, f"{name}: {shown} {what} {where}"))
    return out


def _libraries(ref: Mapping[str, Any], now: Mapping[str, Any]) -> list[Difference]:
    out = []
    for path in sorted(set(ref) | set(now)):
        before, after = ref.get(path), now.get(path)
        if before == after:
            continue
        if before is None or after is None:
            kind = "added" if before is None else "removed"
            text = f"{path} {'only here' if before is None else 'absent here'}"
        elif before[0] != after[0]:
            kind, text = "changed", f"{path} {_absent(before[0])} -> {_absent(after[0])}"
        else:
            kind = "pick"
            text = f"{path}: the loader picks {_absent(before[1])} -> {_absent(after[1])}"
        out.append(Difference("libraries", kind, path, text))
    return out


# Facts of one value each: (key, section, kind, label).
_SCALARS = (
    ("python", "interpreter", "version", "python"),
    ("driver", "accelerator", "driver", "NVIDIA driver"),
    ("nccl", "torch", "nccl", "torch's NCCL"),
)


def drift(reference: Mapping[str, Any], other: Mapping[str, Any]) -> list[Difference]:
    """What ``other`` has that ``reference`` has not, packages first, each placed in the
    snapshot diff's section and kind ("six 1.16.0 -> 1.17.0": packages, upgraded)."""
    out = _packages(reference.get("packages") or {}, other.get("packages") or {})
    if "installed" in reference and "installed" in other:  # an older envguard's: unsaid
        out += _installed(reference["installed"] or {}, other["installed"] or {})
    if "libraries" in reference and "libraries" in other:
        out += _libraries(reference["libraries"] or {}, other["libraries"] or {})
    for key, section, kind, label in _SCALARS:
        if key in reference and key in other and reference[key] != other[key]:
            text = f"{label} {_absent(reference[key])} -> {_absent(other[key])}"
            values = (str(reference[key]), str(other[key]))
            out.append(Difference(section, kind, key, text, values))
    if "host" in reference and "host" in other:  # an older envguard's: unsaid
        out += _host(reference["host"] or {}, other["host"] or {})
    ref_torch, torch = reference.get("torch") or {}, other.get("torch") or {}
    for key in ("cuda", "hip", "git_version"):
        if ref_torch and torch and ref_torch.get(key) != torch.get(key):
            text = f"torch {key} {_absent(ref_torch.get(key))} -> {_absent(torch.get(key))}"
            out.append(Difference("torch", key, "torch", text))
    ref_env, env = reference.get("env") or {}, other.get("env") or {}
    for name in sorted(set(ref_env) | set(env)):
        if ref_env.get(name) != env.get(name):
            before, after = ref_env.get(name), env.get(name)
            kind = "added" if before is None else "removed" if after is None else "changed"
            text = f"{name}={_unset(before)} -> {_unset(after)}"
            out.append(Difference("env", kind, name, text))
    return out


# The host layer's part that must match (probe/target/hostlayer.gated's fields): key ->
# (its kind in the host_layer section of a diff, the label every rank says).
_HOST = {
    "gpus": ("gpu_devices", "GPUs on the PCI bus"),
    "net_plugins": ("net_plugins", "NCCL net plugins"),
    "net_plugin": ("net_plugin", "the net plugin NCCL loads"),
    "nccl_conf": ("nccl_conf", "NCCL config files"),
    "peermem": ("peermem", "nvidia_peermem loaded"),
}


def _host(reference: Mapping[str, Any], other: Mapping[str, Any]) -> list[Difference]:
    """The host layer's differences, each in the host_layer section of a diff."""
    out = []
    for key, (kind, label) in _HOST.items():
        before, after = reference.get(key), other.get(key)
        if before == after:
            continue
        if isinstance(before, list) or isinstance(after, list):
            gone = sorted(set(before or ()) - set(after or ()))
            new = sorted(set(after or ()) - set(before or ()))
            parts = [f"-{_short(v)}" for v in gone] + [f"+{_short(v)}" for v in new]
            counted = f"{len(before or ())} -> {len(after or ())}"
            text = f"{label}: {' '.join(parts) or counted}"
        else:
            text = f"{label} {_absent(before)} -> {_absent(after)}"
        out.append(Difference("host_layer", kind, key, text))
    return out


def _short(value: object) -> str:
    """ "libnccl-net.so <sha256>" as "libnccl-net.so <first 12 hex>"."""
    name, _, digest = str(value).partition(" ")
    return f"{name} {digest[:12]}" if digest else name


def differences(reference: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """What ``other`` has that ``reference`` has not, one short phrase per difference,
    packages first ("six 1.16.0 -> 1.17.0", "six 1.17.0: files differ")."""
    return [d.text for d in drift(reference, other)]


def _unset(value: str | None) -> str:
    return "(unset)" if value is None else value


def said(items: list[str]) -> str:
    if not items:
        return "the fingerprints differ, the details do not say how"
    shown = ", ".join(items[:_MAX_ITEMS])
    more = len(items) - _MAX_ITEMS
    return shown + (f", and {more} more" if more > 0 else "")


def ranks(unit: str, ranks: Sequence[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8]) + (", ..." if len(ranks) > 8 else "")
    return f"{unit}{'s' if len(ranks) > 1 else ''} {shown}"


@dataclass(frozen=True)
class Arrival:
    """What one rank published at the gate: its hash, host, node (the launcher's node rank
    when it says one, else the host), how many ranks its node runs (when the launcher says:
    LOCAL_WORLD_SIZE), and, when the gate was asked for a snapshot, how this rank differs
    from it ("" when it does not)."""

    rank: int
    digest: str
    host: str
    node: str
    local_world_size: int | None = None
    snapshot: str | None = None


def _node_names(arrivals: Sequence[Arrival]) -> dict[int, str]:
    """Each rank's node by name: the host, with the launcher's node rank when several nodes
    share a host name (two launches on one machine)."""
    per_host: dict[str, set[str]] = {}
    for a in arrivals:
        per_host.setdefault(a.host, set()).add(a.node)
    return {
        a.rank: a.host if len(per_host[a.host]) == 1 else f"{a.host}[node {a.node}]"
        for a in arrivals
    }


def _group(group: Sequence[Arrival], names: Mapping[int, str], unit: str) -> str:
    """ "node host-b (ranks 8, 9)": a group's nodes (five said) and its ranks."""
    nodes = list(dict.fromkeys(names[a.rank] for a in group))
    more = f" and {len(nodes) - 5} more" if len(nodes) > 5 else ""
    return f"node {', '.join(nodes[:5])}{more} ({ranks(unit, [a.rank for a in group])})"


def _groups(arrivals: Sequence[Arrival]) -> list[list[Arrival]]:
    """The ranks grouped by hash, largest group first; between groups of one size, the
    group holding the lowest rank first."""
    groups: dict[str, list[Arrival]] = {}
    for a in sorted(arrivals, key=lambda a: a.rank):
        groups.setdefault(a.digest, []).append(a)
    return sorted(groups.values(), key=lambda g: (-len(g), g[0].rank))


def _how(
    details: Mapping[int, Mapping[str, Any]], reference: Sequence[Arrival], group: Sequence[Arrival]
) -> str:
    ref, theirs = details.get(reference[0].rank), details.get(group[0].rank)
    return "" if ref is None or theirs is None else ": " + said(differences(ref, theirs))


def _rest(rest: Sequence[Sequence[Arrival]], names: Mapping[int, str], unit: str) -> str:
    nodes = {names[a.rank] for g in rest for a in g}
    return f"and {len(rest)} more groups ({len(nodes)} nodes, {sum(map(len, rest))} {unit}s)"


def mismatch_message(
    arrivals: Sequence[Arrival], details: Mapping[int, Mapping[str, Any]], *, unit: str
) -> tuple[str, tuple[int, ...]]:
    """The one line every rank says, and the ranks blamed, from everyone's arrival and the
    representatives' details (a representative's detail may be missing: then unsaid).

    A majority (one group larger than any other) is the reference, and the other groups
    are blamed. Without one (two nodes, or two groups of one size) nobody can say which side
    drifted: both sides are named, and every rank is blamed."""
    ordered = _groups(arrivals)
    names = _node_names(arrivals)
    first, others = ordered[0], ordered[1:]
    if len(ordered) > 1 and len(ordered[1]) == len(first):
        parts = [
            f"vs {_group(g, names, unit)}{_how(details, first, g)}" for g in others[:MAX_GROUPS]
        ]
        if len(others) > MAX_GROUPS:
            parts.append(_rest(others[MAX_GROUPS:], names, unit))
        everyone = tuple(sorted(a.rank for a in arrivals))
        message = "environments differ across the job, no majority: "
        return message + _group(first, names, unit) + " " + "; ".join(parts), everyone
    maj_nodes = len({names[a.rank] for a in first})
    majority = (
        f"{maj_nodes} node{'s' if maj_nodes > 1 else ''}, {ranks(unit, [a.rank for a in first])}"
    )
    parts = [
        f"{_group(g, names, unit)} differs from the majority ({majority}){_how(details, first, g)}"
        for g in others[:MAX_GROUPS]
    ]
    if len(others) > MAX_GROUPS:
        parts.append(_rest(others[MAX_GROUPS:], names, unit))
    odd = tuple(sorted(a.rank for g in others for a in g))
    return "environments differ across the job: " + "; ".join(parts), odd


def snapshot_message(
    arrivals: Sequence[Arrival], *, snapshot: str, unit: str
) -> tuple[str, tuple[int, ...]] | None:
    """The one line when some ranks differ from the snapshot the gate was asked for (each
    rank said how), and those ranks; None when none does."""
    off = [a for a in arrivals if a.snapshot]
    if not off:
        return None
    names = _node_names(arrivals)
    groups = _groups(off)
    parts = [
        f"{_group(g, names, unit)} differs from the snapshot {snapshot}: {g[0].snapshot}"
        for g in groups[:MAX_GROUPS]
    ]
    if len(groups) > MAX_GROUPS:
        parts.append(_rest(groups[MAX_GROUPS:], names, unit))
    return "; ".join(parts), tuple(sorted(a.rank for a in off))


def missing_nodes(missing: Sequence[int], came: Sequence[Arrival], *, unit: str) -> str:
    """Where the ranks that never came run, when the launcher says how many ranks a node
    runs (torchrun's ranks are node-major): "node host-b: ranks 2, 3; node rank 2: rank 4";
    "" when it does not."""
    sizes = {a.local_world_size for a in came if a.local_world_size}
    if len(sizes) != 1 or not missing:
        return ""
    (size,) = sizes
    names = _node_names(came)
    by_index = {a.rank // size: names[a.rank] for a in came}
    per_node: dict[str, list[int]] = {}
    for r in missing:
        node = by_index.get(r // size)
        per_node.setdefault(f"node {node}" if node else f"node rank {r // size}", []).append(r)
    return "; ".join(f"{node}: {ranks(unit, rs)}" for node, rs in per_node.items())


def line(text: object, cap: int = 64) -> str:
    """Another rank's word, as one short printable line (it goes into every rank's error)."""
    return "".join(c if c.isprintable() else "?" for c in str(text))[:cap]
