"""What every layer fails on: one decision for ``check``, the Slurm prolog and NHC (which
run ``check``) and the rank gate, from one policy (the defaults, `[tool.envguard]`
fail-on and severities, --fail-on).

``check`` weighs the changes of a snapshot diff; the gate weighs the differences between
nodes' fingerprints (blame.Difference), each placed in the section and kind the diff would
give it, with the severity the section gives it by default: so a change the diff calls
critical is critical at the gate too, and the user's overrides apply to both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from envguard.compare.sections.packages import package_severity, version_change
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.blame import Difference
    from envguard.compare.policy import Policy

C, W, I = Severity.critical, Severity.warning, Severity.info  # noqa: E741

# The severity each section gives a difference of this kind by default (the sections'
# own: compare/sections/*.py), for the facts a fingerprint holds.
_DEFAULTS: dict[tuple[str, str], Severity] = {
    ("interpreter", "version"): C,
    ("accelerator", "driver"): C,
    ("torch", "nccl"): C,
    ("torch", "cuda"): C,
    ("torch", "hip"): C,
    ("torch", "git_version"): C,
    ("libraries", "changed"): C,
    ("libraries", "pick"): C,
    ("libraries", "removed"): W,
    ("libraries", "added"): I,
    ("host_layer", "gpu_devices"): C,
    ("host_layer", "net_plugins"): C,
    ("host_layer", "net_plugin"): C,
    ("host_layer", "nccl_conf"): C,
    ("host_layer", "peermem"): C,
    ("env", "added"): W,
    ("env", "removed"): W,
    ("env", "changed"): W,
}


def fails(policy: Policy, severities: Iterable[Severity]) -> bool:
    """Whether a layer fails on drift of these severities: some reaches the policy's
    fail-on (``never``: none does). The one rule of check, prolog, NHC and the gate."""
    level = policy.fail_on
    return level is not None and any(s.rank >= level.rank for s in severities)


def weigh(policy: Policy, difference: Difference) -> Severity | None:
    """The severity the policy gives one difference between nodes, as ``check`` would give
    the same change; None when the policy ignores it."""
    section, kind, name = difference.section, difference.kind, difference.name
    if section in policy.ignore_sections:
        return None
    if section in ("packages", "installed"):
        if policy.ignores_package(name):
            return None
        if difference.values is not None:
            kind = version_change(name, *difference.values)[0]
        default = package_severity(policy, name)
    elif (section, kind) == ("interpreter", "version") and difference.values is not None:
        # "cpython 3.11.4": another implementation or minor version is critical, as in check
        before, after = (v.rsplit(".", 1)[0] for v in difference.values)
        default = C if before != after else W
    else:
        default = _DEFAULTS.get((section, kind), C)  # a fact this table misses: the worst
    return policy.level(section, kind, default)


def gate_fails(policy: Policy, differences: Iterable[Difference]) -> bool:
    """Whether the gate stops a job whose nodes differ by ``differences``."""
    weights = (weigh(policy, d) for d in differences)
    return fails(policy, (w for w in weights if w is not None))
