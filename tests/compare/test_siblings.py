"""Packages that move together: an exact pin in one's metadata on another, and the table
(the flashinfer trio; torch with torchvision and torchaudio) where metadata does not say."""

from __future__ import annotations

from envguard.compare.engine import diff
from envguard.compare.lockfiles.drift import lock_drift
from envguard.compare.policy import Policy
from envguard.compare.sections.siblings import splits
from envguard.snapshots.models import Package
from factories import package, snapshot


def with_requires(name: str, version: str, *requires: str) -> Package:
    return package(name, version).model_copy(update={"requires": requires})


def test_an_exact_pin_the_installed_version_breaks_is_named() -> None:
    snap = snapshot(
        [
            with_requires("torch", "2.13.0+cpu", 'triton==3.8.0; platform_system == "Linux"'),
            package("triton", "3.7.1"),
            with_requires("torchaudio", "2.14.1", "torch==2.14.1"),
        ],
        interpreter=snapshot().interpreter.model_copy(
            update={"markers": {"platform_system": "Linux"}}
        ),
    )
    assert splits(snap) == {
        "torch triton": "torch 2.13.0+cpu is built for triton==3.8.0, and triton 3.7.1 is"
        " installed: they move together",
        "torchaudio torch": "torchaudio 2.14.1 is built for torch==2.14.1, and torch"
        " 2.13.0+cpu is installed: they move together",
    }


def test_a_pin_whose_marker_is_false_here_or_an_extra_is_not_a_split() -> None:
    snap = snapshot(
        [
            with_requires("torch", "2.14.1", 'triton==3.8.0; platform_system == "Windows"'),
            with_requires("a", "1", 'b==2; extra == "fast"', "c>=1"),
            package("triton", "3.7.1"),
            package("b", "1"),
            package("c", "0.5"),
        ],
        interpreter=snapshot().interpreter.model_copy(
            update={"markers": {"platform_system": "Linux"}}
        ),
    )
    assert splits(snap) == {}


def test_a_local_build_label_satisfies_a_pin_without_one() -> None:
    snap = snapshot(
        [with_requires("torchvision", "0.29.1", "torch==2.14.1"), package("torch", "2.14.1+cu130")]
    )
    assert splits(snap) == {}


def test_the_table_names_the_torch_family_and_the_flashinfer_trio() -> None:
    snap = snapshot(
        [
            package("torch", "2.13.0+cpu"),
            package("torchvision", "0.29.1"),  # its metadata says torch>=2.14.0, no pin
            package("torchaudio", "2.13.0"),
            package("flashinfer-python", "0.6.2"),
            package("flashinfer-cubin", "0.6.1"),
            package("flashinfer-jit-cache", "0.6.2+cu130"),
        ]
    )
    assert splits(snap) == {
        "torch torchvision": "torchvision 0.29.1 goes with torch 2.14, and torch 2.13.0+cpu is"
        " installed (the torch family moves together)",
        "flashinfer-python flashinfer-cubin": "flashinfer-cubin 0.6.1 goes with"
        " flashinfer-python 0.6.1, and flashinfer-python 0.6.2 is installed (the flashinfer"
        " family moves together)",
    }
    # Without torch, its family is not judged among the others.
    alone = snapshot([package("torchvision", "0.29.1"), package("torchaudio", "2.9.0")])
    assert splits(alone) == {}


def test_a_split_new_since_the_good_snapshot_is_critical_one_it_had_is_info() -> None:
    good = snapshot([package("torch", "2.14.1"), package("torchvision", "0.29.1")])
    bad = snapshot([package("torch", "2.13.0+cpu"), package("torchvision", "0.29.1")])
    ((kind, severity),) = {
        (c.kind, c.severity.value) for c in diff(good, bad).changes if c.section == "siblings"
    }
    assert (kind, severity) == ("split", "critical")
    same = [c for c in diff(bad, bad).changes if c.section == "siblings"]
    assert [c.severity.value for c in same] == ["info"]
    mended = [c for c in diff(bad, good).changes if c.section == "siblings"]
    assert [(c.kind, c.severity.value) for c in mended] == [("together", "info")]


def test_a_lock_check_names_a_split() -> None:
    snap = snapshot([package("torch", "2.13.0+cpu"), package("torchvision", "0.29.1")])
    drift = lock_drift(snap, {}, policy=Policy(), lock="uv.lock")
    assert [c.kind for c in drift.changes if c.section == "siblings"] == ["split"]


def test_lines_skipped_unparsed_are_those_a_parse_finds_no_pin_in() -> None:
    """_pins() parses only lines with "==" before their marker: it finds what parsing
    every line finds (a URL may hold ";" and "==", a marker "==")."""
    from packaging.requirements import Requirement

    from envguard.compare.sections.siblings import _pins

    lines = (
        "a==1",
        "b (==2)",
        "c==3; python_version >= '3'",
        'd==4 ; extra == ""',
        'e>=1; extra == "test"',
        "f @ https://example.org/f.whl;x==1",
        "g @ https://example.org/g.whl ; python_version == '3.11'",
        "h[x,y]===5",
        "i>=1,==1.5",
        "j==1.*",
    )
    markers = {"python_version": "3.11"}
    found = dict(_pins(with_requires("p", "1", *lines), markers))
    every = {}
    for line in lines:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({**markers, "extra": ""}):
            continue
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
            every[req.name] = specs[0].version
    assert found == every == {"a": "1", "b": "2", "c": "3", "d": "4", "h": "5"}
