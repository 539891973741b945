"""Packages that must move together, and a state that splits them: a torchvision built for
one torch beside another, flashinfer-python without its own flashinfer-cubin.

Two sources, both facts of one snapshot:

- **their own metadata**: a Requires-Dist that pins another installed package exactly
  (``torchvision 0.29.1`` requires ``torch==2.14.1``; torch pins its ``triton``), its
  marker true for the snapshot's interpreter. pip and uv honour it at install time, but
  ``--no-deps``, a second install over the first or a hand-made venv leave it broken;
- **a short table** where the metadata does not say it (FAMILIES below).

Scored like the fit section: a split that is new since the good snapshot is critical, one
the good snapshot already had is info, one that is mended is info.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envguard.compare.sections.base import Section
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.compare.models import Change
    from envguard.snapshots.models import Package, Snapshot

# Families whose members' versions say they belong together, where their metadata does not
# pin each other (docs/siblings.md): (the family, its members, the rule).
#   "same":   every member at the same release (flashinfer-python 0.6.2 ships its kernels
#             as flashinfer-cubin 0.6.2 and flashinfer-jit-cache 0.6.2+cu130; flashinfer#4337);
#   "torch":  torchvision 0.(N+15) and torchaudio 2.N go with torch 2.N (the releases
#             PyTorch makes together; each also pins torch exactly in its metadata, which
#             is read first: the table names a pair whose metadata was rewritten or lost).
FAMILIES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("flashinfer", ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"), "same"),
    ("torch", ("torch", "torchvision", "torchaudio"), "torch"),
)


def _release(version: str) -> tuple[int, ...] | None:
    try:
        return Version(version).release
    except InvalidVersion:
        return None


def _pins(pkg: Package, markers: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(canonical name, the exact version) of each package ``pkg`` pins with ``==``, its
    marker true here (an extra's requirement is not installed by default: left out)."""
    environment = tuple(sorted(markers.items()))
    for line in pkg.requires:
        # Most lines pin nothing, and most that hold "==" hold it in their marker
        # (``; extra == "test"``): not worth a parse. A marker starts at the first ";"
        # (no name, extra or specifier holds one), so a pin is before it.
        if "==" not in line.partition(";")[0]:
            continue
        pin = _pin(line, environment)
        if pin is not None:
            yield pin


# A diff reads the same lines on both sides (and fleet on every host): each parsed once.
@lru_cache(maxsize=4096)
def _pin(line: str, environment: tuple[tuple[str, str], ...]) -> tuple[str, str] | None:
    try:
        req = Requirement(line)
    except InvalidRequirement:
        return None
    if req.marker is not None:
        try:
            if not req.marker.evaluate({**dict(environment), "extra": ""}):
                return None
        except (UndefinedComparison, UndefinedEnvironmentName):
            return None  # odd metadata: not ours to judge
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return canonicalize_name(req.name), specs[0].version
    return None


def splits(snap: Snapshot) -> dict[str, str]:
    """Key -> message of each pair of packages that must move together and do not."""
    packages = snap.package_map()
    markers = dict(snap.interpreter.markers)
    out: dict[str, str] = {}
    for pkg in packages.values():
        for name, pinned in _pins(pkg, markers):
            other = packages.get(name)
            if other is None or name == pkg.name:
                continue
            if SpecifierSet(f"=={pinned}").contains(other.version, prereleases=True):
                continue
            out[f"{pkg.name} {name}"] = (
                f"{pkg.name} {pkg.version} is built for {name}=={pinned}, and {name}"
                f" {other.version} is installed: they move together"
            )
    for family, members, rule in FAMILIES:
        present = [packages[m] for m in members if m in packages]
        if len(present) < 2 or (rule == "torch" and present[0].name != "torch"):
            continue
        lead = present[0]
        for other in present[1:]:
            key = f"{lead.name} {other.name}"
            if key in out or f"{other.name} {lead.name}" in out:
                continue  # the metadata said it already
            partner = _partner(lead, other, rule)
            if partner is not None:
                out[key] = (
                    f"{other.name} {other.version} goes with {lead.name} {partner}, and"
                    f" {lead.name} {lead.version} is installed (the {family} family moves"
                    " together)"
                )
    return out


def _partner(lead: Package, other: Package, rule: str) -> str | None:
    """The version of ``lead`` that ``other`` goes with, when it is not the one installed
    (None: they go together, or a version the table cannot read)."""
    ours, theirs = _release(lead.version), _release(other.version)
    if ours is None or theirs is None or len(ours) < 2 or len(theirs) < 2:
        return None
    if rule == "same":
        return None if ours == theirs else ".".join(map(str, theirs))
    if other.name == "torchvision":
        if ours[0] != 2 or theirs[0] != 0 or theirs[1] < 15:
            return None  # before torch 2.0 the numbering was another
        wanted = (2, theirs[1] - 15)
    else:  # torchaudio 2.N with torch 2.N
        wanted = (theirs[0], theirs[1])
    return None if ours[:2] == wanted else f"{wanted[0]}.{wanted[1]}"


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    before, after = splits(e), splits(a)
    for key, message in sorted(after.items()):
        known = before.get(key) == message
        b.finding(
            "split",
            key,
            expected=before.get(key),
            actual=message,
            message=message,
            known=known,
        )
    for key in sorted(before.keys() - after.keys()):
        b.add(
            "together",
            key,
            expected=before[key],
            severity=Severity.info,
            message=f"{key.replace(' ', ' and ')} go together again",
        )


def facts(b: Collector, snap: Snapshot) -> None:
    """The splits of ``snap`` with no good snapshot to weigh them by (a lock check)."""
    for key, message in sorted(splits(snap).items()):
        b.add("split", key, actual=message, severity=Severity.critical, message=message)


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    for key, message in sorted(splits(snap).items()):
        yield f"split {key}", message


def restore_hint(change: Change, snapshot: Snapshot) -> str | None:
    if change.kind != "split":
        return None
    return f"{change.message}; install them in one command so the resolver sees both"


SECTION = Section(
    name="siblings",
    title="Packages that move together",
    compare=compare,
    identity=identity,
    restore_hint=restore_hint,
)
