"""One decision for every layer: the gate weighs a difference between nodes as ``check``
weighs the same change against a snapshot, by the same policy."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from envguard.blame import drift
from envguard.compare.layers import fails, gate_fails, weigh
from envguard.compare.policy import Policy, policy_from_table
from envguard.compare.severity import Severity


def _detail(**more: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "python": "cpython 3.11.7",
        "packages": {"six": ["1.16.0", "a" * 64], "torch": ["2.13.0+cpu", "b" * 64]},
        "installed": {},
        "libraries": {},
        "torch": {"version": "2.13.0+cpu", "cuda": None, "hip": None, "git_version": "g"},
        "driver": None,
        "env": {},
    }
    return base | more


PATCHED = _detail(
    installed={"torch": {"modified": ["torch/nn/functional.py"], "missing": [], "added": []}}
)
SIX = _detail(packages={"six": ["1.17.0", "c" * 64], "torch": ["2.13.0+cpu", "b" * 64]})


def test_a_hot_patched_torch_file_is_critical_and_named() -> None:
    (difference,) = drift(_detail(), PATCHED)
    assert (difference.section, difference.kind) == ("installed", "modified_in_place")
    assert "torch/nn/functional.py edited in place" in difference.text
    assert weigh(Policy(), difference) is Severity.critical
    # critical: every layer's fail-on but "never" stops it
    for level in ("critical", "warning", "info"):
        assert gate_fails(policy_from_table({"fail-on": level}, where="t"), [difference])


def test_a_plain_package_change_is_a_warning_as_in_check() -> None:
    (difference,) = drift(_detail(), SIX)
    assert weigh(Policy(), difference) is Severity.warning  # "upgraded", as check names it
    assert gate_fails(Policy(), [difference])  # the default fail-on: warning
    assert not gate_fails(policy_from_table({"fail-on": "critical"}, where="t"), [difference])


def test_the_users_severities_and_ignores_apply_to_the_gate() -> None:
    six = drift(_detail(), SIX)
    lowered = policy_from_table({"severity": {"packages.upgraded": "info"}}, where="t")
    assert not gate_fails(lowered, six)
    assert gate_fails(policy_from_table({"severity": {"packages": "critical"}}, where="t"), six)
    assert not gate_fails(policy_from_table({"ignore-packages": ["six"]}, where="t"), six)
    patched = drift(_detail(), PATCHED)
    assert not gate_fails(policy_from_table({"ignore-sections": ["installed"]}, where="t"), patched)


@pytest.mark.parametrize(
    ("before", "after", "level"),
    [
        ("cpython 3.11.7", "cpython 3.11.9", Severity.warning),
        ("cpython 3.11.7", "cpython 3.12.1", Severity.critical),
    ],
)
def test_python_weighs_as_in_check(before: str, after: str, level: Severity) -> None:
    (difference,) = drift(_detail(python=before), _detail(python=after))
    assert weigh(Policy(), difference) is level


def test_libraries_a_changed_version_or_pick_is_critical_an_extra_one_info() -> None:
    lib = "nvidia/nccl/lib/libnccl.so.2"
    ref = _detail(libraries={lib: ["2.21.5", "/site/nvidia/nccl/lib/libnccl.so.2"]})
    newer = _detail(libraries={lib: ["2.26.2", "/site/nvidia/nccl/lib/libnccl.so.2"]})
    picked = _detail(libraries={lib: ["2.21.5", "/usr/lib/libnccl.so.2"]})
    assert [weigh(Policy(), d) for d in drift(ref, newer)] == [Severity.critical]
    assert [d.kind for d in drift(ref, picked)] == ["pick"]
    assert [weigh(Policy(), d) for d in drift(_detail(), ref)] == [Severity.info]


def test_fails_is_checks_rule() -> None:
    assert fails(Policy(), [Severity.warning])
    assert not fails(Policy(), [Severity.info])
    assert not fails(replace(Policy(), fail_on=None), [Severity.critical])
    assert not fails(Policy(), [])
