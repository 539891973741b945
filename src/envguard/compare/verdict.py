"""The few lines a person reads first: the torch build named, the installs that caused the
rest, what else moved, the files and caches, the last good run's metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from envguard.compare.causes import Cause
from envguard.compare.models import Change, primary_changes
from envguard.compare.policy import Policy
from envguard.compare.sections.packages import torch_version
from envguard.compare.severity import Severity
from envguard.redact import redact_metrics
from envguard.snapshots.models import Snapshot


def _cuda(snap: Snapshot) -> str:
    if snap.torch is None:
        return "none"
    return snap.torch.cuda or (f"HIP {snap.torch.hip}" if snap.torch.hip else "none")


def verdict(
    expected: Snapshot,
    actual: Snapshot,
    changes: Sequence[Change],
    causes: Sequence[Cause],
    policy: Policy,
) -> tuple[str, ...]:
    """A few short lines, worst first; none when nothing drifted. Each kind of change has
    at most one line (the installs two), so none crowds another out: the torch build, the
    installs behind the rest, the GPU stack, downgrades by name, other packages, files,
    caches, variables, the last good run."""
    if not changes:
        return ()
    lines = []
    before, after = torch_version(expected), torch_version(actual)
    if before != after or _cuda(expected) != _cuda(actual):
        cuda = (
            f" (CUDA {_cuda(expected)} -> {_cuda(actual)})"
            if _cuda(expected) != _cuda(actual)
            else ""
        )
        lines.append(f"torch {before or 'absent'} -> {after or 'absent'}{cuda}")
    packages = [c for c in changes if c.section == "packages"]
    by_name = primary_changes(packages)
    installed = actual.package_map()
    ranked = sorted(causes, key=lambda c: (-len(c.members), c.root))
    grouped = {n for c in ranked for n in (c.root, *c.members)}
    for cause in ranked[:1]:
        root = installed.get(cause.root)
        how = by_name[cause.root].kind if cause.root in by_name else "changed"
        verb = "installed" if how == "added" else how.replace("_", " ")
        kinds = Counter(by_name[m].kind for m in cause.members if m in by_name)
        gpu = sum(1 for m in cause.members if policy.is_critical_package(m))
        extra = [f"{gpu} GPU stack"] if gpu else []
        extra += [f"{n} {k}" for k, n in sorted(kinds.items()) if k in ("downgraded", "removed")]
        detail = f" ({', '.join(extra)})" if extra else ""
        lines.append(
            f"{cause.root} {root.version if root else ''} {verb} with {len(cause.members)}"
            f" package{'s' if len(cause.members) != 1 else ''} it pulled in{detail}"
        )
    if len(ranked) > 1:  # every other install named, biggest first, on one line
        said = [f"{c.root} (+{len(c.members)})" if c.members else c.root for c in ranked[1:]]
        more = f" and {len(said) - 4} more" if len(said) > 4 else ""
        lines.append("also installed: " + ", ".join(said[:4]) + more)
    # The GPU stack is never left out of the verdict: by name, unless the first install's
    # line already counts it.
    counted = {n for c in ranked[:1] for n in (c.root, *c.members)}
    gpu_rest = [
        c
        for name, c in sorted(by_name.items())
        if name not in counted and name != "torch" and policy.is_critical_package(name)
    ]
    if gpu_rest:
        said = [
            f"{c.name} {c.actual or c.expected or ''} {c.kind.replace('_', ' ')}" for c in gpu_rest
        ]
        lines.append("GPU stack: " + _some([s.replace("  ", " ") for s in said]))
        grouped |= {c.name for c in gpu_rest}
    lines += _installed_lines(changes)
    # Downgrades by name, once each (a package two installs pulled back is one downgrade).
    down = [c for n, c in sorted(by_name.items()) if c.kind == "downgraded" and n != "torch"]
    if down:
        lines.append("downgraded: " + _some([f"{c.name} {c.expected} -> {c.actual}" for c in down]))
    rest = Counter(
        c.kind
        for name, c in by_name.items()
        if name not in grouped and name != "torch" and c.kind != "downgraded"
    )
    if rest:
        parts = [f"{n} {_plural(kind, n)}" for kind, n in rest.most_common(4)]
        lines.append("other packages: " + ", ".join(parts))
    # What the bytes contradict first: a clobbered file, a library loaded from elsewhere.
    libraries = sorted(
        (c for c in changes if c.section == "libraries" and c.severity.rank >= 3),
        key=lambda c: c.kind not in ("mismatch", "shadowed"),
    )
    if libraries:
        lines.append(_some([c.message for c in libraries], shown=1))
    # An extension that cannot load, and a pair that moves together left split: the first
    # of each in its own words.
    for section in ("fit", "siblings"):
        found = [c.message for c in changes if c.section == section and c.severity.rank >= 3]
        if found:
            lines.append(_some(found, shown=1))
    files = [c.name for c in changes if c.section == "files"]
    if files:
        lines.append(
            f"{_some(files)} changed" if len(files) < 4 else f"files changed: {_some(files)}"
        )
    caches = [c for c in changes if c.section == "caches"]
    if caches:
        lines.append(
            _some(sorted({f"{_cache_label(c)} {_CACHE_WORDS.get(c.kind, c.kind)}" for c in caches}))
        )
    variables = [
        c for c in changes if c.section == "env" and c.severity.rank >= Severity.warning.rank
    ]
    if variables:
        lines.append("variables: " + _some([_variable(c) for c in variables]))
    if expected.metrics:
        shown_metrics = redact_metrics(dict(expected.metrics))
        lines.append("last good run: " + ", ".join(f"{k}={v}" for k, v in shown_metrics.items()))
    return tuple(lines)


def _variable(change: Change) -> str:
    """``NCCL_P2P_DISABLE set (1)``, ``CUDA_VISIBLE_DEVICES 0,1 -> 0``, values cut short."""

    def short(value: str | None) -> str:
        text = value or ""
        return text if len(text) <= 24 else text[:23] + "…"

    if any((v or "").startswith("<redacted") for v in (change.expected, change.actual)):
        return f"{change.name} {change.kind} (values redacted)"
    if change.kind == "added":
        return f"{change.name} set ({short(change.actual)})"
    if change.kind == "removed":
        return f"{change.name} unset (was {short(change.expected)})"
    return f"{change.name} {short(change.expected)} -> {short(change.actual)}"


_FILE_WORDS = {
    "modified_in_place": "edited in place",
    "files_missing": "files missing",
    "files_added": "files added",
    "clobbered": "overwritten by another package",
}


def _installed_lines(changes: Sequence[Change]) -> list[str]:
    """Who owns a library two packages install (install order), then which packages' files
    are not what they installed."""
    lines = []
    owners = [c for c in changes if c.section == "installed" and c.kind == "owner_changed"]
    if owners:
        said = [f"{c.name} is {c.actual or 'no one'}'s copy (was {c.expected})" for c in owners]
        lines.append("installed over each other: " + _some(said))
    edited = [c for c in changes if c.section == "installed" and c.kind in _FILE_WORDS]
    if edited:
        by_package: dict[str, list[str]] = {}
        for c in edited:
            by_package.setdefault(c.name, []).append(_FILE_WORDS[c.kind])
        said = [f"{name} ({', '.join(words)})" for name, words in by_package.items()]
        lines.append("installed files changed: " + _some(said))
    unowned = [c.name for c in changes if c.section == "installed" and c.kind == "unowned_added"]
    if unowned:
        lines.append("in site-packages, owned by no package: " + _some(unowned))
    return lines


def _some(items: Sequence[str], shown: int = 3) -> str:
    """``a, b, c and 4 more``."""
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _plural(kind: str, n: int) -> str:
    words = {
        "added": "added",
        "removed": "removed",
        "upgraded": "upgraded",
        "downgraded": "downgraded",
        "content_changed": "rebuilt with other files",
        "source_changed": "from another source",
        "variant_changed": "another build",
        "installer_changed": "installed by another tool",
        "requested_changed": "requested differently",
    }
    return words.get(kind, kind.replace("_", " "))


_CACHE_WORDS = {
    "cold": "cold",
    "missing": "cold (deleted)",
    "shrunk": "shrunk",
    "will-miss": "will miss",
    "may-miss": "may miss",
    "rebuild": "will rebuild its kernels",
    "stale": "stale",
    "network-fs": "on a network file system",
}


def _cache_label(change: Change) -> str:
    """``inductor cache`` from the caches section's message (``inductor cache PATH ...``)."""
    head, sep, _ = change.message.partition(" cache")
    return f"{head} cache" if sep and " " not in head else "cache"


# What a check against a lockfile found, in the words of its verdict line.
_LOCK_WORDS = {
    "pin_differs": "pins differ",
    "not_installed": "in the lock, not installed",
    "not_in_lock": "installed, not in the lock",
    "variant_unpinned": "build variant not pinned",
    "source_differs": "installed from another source",
}


def _pinned(change: Change, *, kind: bool = False) -> str:
    """``numpy 2.1.0 (lock: 2.0.0)``: the environment's version, then the lock's."""
    if change.expected and change.actual:
        text = f"{change.name} {change.actual} (lock: {change.expected})"
    else:
        text = f"{change.name} {change.actual or change.expected or ''}".rstrip()
    return f"{text} {_LOCK_WORDS.get(change.kind, change.kind)}" if kind else text


def lock_verdict(changes: Sequence[Change], policy: Policy) -> tuple[str, ...]:
    """The verdict of a check against a lockfile: what stops the interpreter using it, the
    torch build, the GPU stack, then one line per kind of change, worst first (``changes``
    are sorted worst first); none when nothing drifted."""
    # What is wrong with the lock itself comes first, in its own words (a stale uv.lock).
    lines = [c.message for c in changes if c.section != "packages" or c.kind == "lock_stale"]
    packages = [c for c in changes if c.section == "packages" and c.kind != "lock_stale"]
    lines += [c.message for c in packages if c.name == "torch"][:1]
    gpu = [c for c in packages if c.name != "torch" and policy.is_critical_package(c.name)]
    if gpu:
        lines.append("GPU stack: " + _some([_pinned(c, kind=True) for c in gpu]))
    by_kind: dict[str, list[Change]] = {}
    for c in packages:
        if c.name != "torch" and not policy.is_critical_package(c.name):
            by_kind.setdefault(c.kind, []).append(c)
    for kind, group in by_kind.items():
        words = _LOCK_WORDS.get(kind, kind.replace("_", " "))
        lines.append(f"{words}: " + _some([_pinned(c) for c in group]))
    return tuple(lines)


def locks_verdict(
    changes: Sequence[Change], policy: Policy, causes: Sequence[Cause] = ()
) -> tuple[str, ...]:
    """The verdict of a lock change (old -> new): the torch build, the GPU stack, the
    package that pulled in the most (``sglang 0.4.0 added (+37 packages it pulls in)``),
    the other such packages, downgrades by name, the changes locked only for some
    environments, then the other packages counted; none when nothing changed."""
    lines = []

    def moved(c: Change) -> str:
        return f"{c.name} {c.expected or 'absent'} -> {c.actual or 'absent'}"

    lines += [moved(c) for c in changes if c.name == "torch"][:1]
    gpu = [c for c in changes if c.name != "torch" and policy.is_critical_package(c.name)]
    if gpu:
        lines.append("GPU stack: " + _some([moved(c) for c in gpu]))
    by_name = {c.name: c for c in changes}
    ranked = sorted(causes, key=lambda c: (-len(c.members), c.root))
    for cause in ranked[:1]:
        root = by_name[cause.root]
        n = len(cause.members)
        if root.kind == "removed":
            lines.append(
                f"{root.name} {root.expected} removed"
                f" (with {n} package{'s' if n != 1 else ''} it pulled in)"
            )
        else:
            what = (
                f"{root.name} {root.actual} added"
                if root.kind == "added"
                else f"{moved(root)} {root.kind.replace('_', ' ')}"
            )
            lines.append(f"{what} (+{n} package{'s' if n != 1 else ''} it pulls in)")
    if len(ranked) > 1:
        others = [f"{c.root} (+{len(c.members)})" for c in ranked[1:]]
        more = f" and {len(others) - 4} more" if len(others) > 4 else ""
        lines.append("also pulling in others: " + ", ".join(others[:4]) + more)
    grouped = {n for c in ranked for n in (c.root, *c.members)}
    rest = [c for c in changes if c.name != "torch" and not policy.is_critical_package(c.name)]
    down = [c for c in rest if c.kind == "downgraded"]
    if down:
        lines.append("downgraded: " + _some([f"{c.name} {c.expected} -> {c.actual}" for c in down]))
    # A change the lock makes only for some environments or selections is named, with them:
    # read on one platform, it would otherwise pass unseen.
    scoped = [c for c in rest if any(_is_marker(s) for s in c.scope)]
    if scoped:
        lines.append(
            "only for some environments: "
            + _some([f"{moved(c)} [{'; '.join(c.scope)}]" for c in scoped])
        )
    said = grouped | {c.name for c in scoped}
    counted = Counter(c.kind for c in rest if c.kind != "downgraded" and c.name not in said)
    if counted:
        parts = [f"{n} {_plural(kind, n)}" for kind, n in counted.most_common(4)]
        lines.append("other packages: " + ", ".join(parts))
    return tuple(lines)


def _is_marker(scope: str) -> bool:
    """An environment marker, not an extra or a group."""
    return not scope.startswith(("extra ", "group "))
