"""Every format counts the same things: the summary's figures are the rows shown, the changes
folded into an install's row are counted apart and add up to the JSON's changes, and an
install's "packages it pulled in" is one figure in the verdict, its row, the JSON, the HTML
and bisect's unit."""

from __future__ import annotations

import io
import json
import re
from collections import Counter

import pytest
from rich.console import Console

from envguard.compare.engine import diff
from envguard.compare.models import Drift
from envguard.recovery.bisect import units
from envguard.render.github import drift_github
from envguard.render.html import drift_html
from envguard.render.json import drift_json
from envguard.render.markdown import drift_markdown
from envguard.render.table import drift_table
from envguard.snapshots.models import Package
from factories import package, snapshot

DEPS = [f"sgdep{i:02d}" for i in range(30)]
SHARED = [f"shared{i}" for i in range(5)]  # pulled in by both installs
OWN = [f"outdep{i}" for i in range(3)]


def _with(pkg: Package, *requires: str) -> Package:
    return pkg.model_copy(update={"requires": requires})


GOOD = snapshot(
    [package("torch", "2.13.0"), package("numpy", "2.1.0"), package("requests", "2.31.0")]
)
# An sglang-style pollution: two installs sharing five dependencies, a pulled-in downgrade
# and upgrade, critical members (torch, the GPU stack), one lone install.
BAD = snapshot(
    [
        package("torch", "2.14.1"),
        package("numpy", "1.26.4"),
        package("requests", "2.32.0"),
        _with(
            package("sglang", "0.5.23"),
            "torch",
            "numpy<2",
            "requests",
            "flashinfer-python",
            "nvidia-nccl-cu12",
            *DEPS,
            *SHARED,
        ),
        _with(package("outlines", "0.1.0"), *SHARED, *OWN),
        package("flashinfer-python", "0.2.0"),
        package("nvidia-nccl-cu12", "2.21.5"),
        package("six", "1.17.0"),
        *(package(n, "1.0") for n in DEPS + SHARED + OWN),
    ],
    name="bad",
)
SGLANG = len(DEPS) + len(SHARED) + 5  # and torch, numpy, requests, flashinfer, nccl
OUTLINES = len(SHARED) + len(OWN)


@pytest.fixture(scope="module")
def drift() -> Drift:
    return diff(GOOD, BAD)


def _table(drift: Drift, *, expand: bool = False) -> list[str]:
    console = Console(width=400, color_system=None, record=True, file=io.StringIO())
    drift_table(drift, console, expand=expand)
    return console.export_text().splitlines()


def _figures(line: str) -> dict[str, int]:
    """``7 critical, 4 warnings`` -> {"critical": 7, "warning": 4}."""
    return {level: int(n) for n, level in re.findall(r"(\d+) (critical|warning|info)", line)}


def _shown_and_folded(summary: str) -> tuple[dict[str, int], dict[str, int]]:
    shown, _, folded = summary.partition("(plus ")
    return _figures(shown), _figures(folded)


def _json_counts(drift: Drift) -> Counter[str]:
    return Counter(c["severity"] for c in json.loads(drift_json(drift))["changes"])


def test_the_table_summary_counts_its_rows_and_the_folded_apart(drift: Drift) -> None:
    lines = _table(drift)
    rows = Counter(m.group(1) for line in lines if (m := re.match(r"│ (\w+) +│", line)))
    summary = next(line for line in lines if line.startswith("drift from "))
    shown, folded = _shown_and_folded(summary)
    assert shown == dict(rows)
    assert folded, summary  # the members are folded, and said to be
    total = Counter(shown) + Counter(folded)
    assert total == _json_counts(drift)


def test_expanded_the_summary_counts_every_row(drift: Drift) -> None:
    lines = _table(drift, expand=True)
    rows = Counter(m.group(1) for line in lines if (m := re.match(r"│ (\w+) +│", line)))
    summary = next(line for line in lines if line.startswith("drift from "))
    assert "(plus" not in summary
    assert _figures(summary) == dict(rows) == dict(_json_counts(drift))


def test_markdown_html_and_github_count_as_the_table_does(drift: Drift) -> None:
    shown, folded = _shown_and_folded(next(x for x in _table(drift) if x.startswith("drift")))
    md = drift_markdown(drift)
    assert _shown_and_folded(md.splitlines()[2]) == (shown, folded)
    headings = dict(re.findall(r"^### \S+ (critical|warning|info) \((\d+)\)$", md, re.M))
    assert {k: int(v) for k, v in headings.items()} == shown
    html = drift_html(drift)
    sections = dict(re.findall(r'<h2 class="\w+">(critical|warning|info) \((\d+)\)</h2>', html))
    assert {k: int(v) for k, v in sections.items()} == shown
    annotations = Counter(
        re.match(r"::(\w+) ", line).group(1)  # type: ignore[union-attr]
        for line in drift_github(drift).splitlines()
        if not line.startswith("::notice title=envguard verdict")
    )
    named = {"error": "critical", "warning": "warning", "notice": "info"}
    assert {named[k]: n for k, n in annotations.items()} == shown


def test_an_install_pulled_in_one_number_of_packages_everywhere(drift: Drift) -> None:
    assert f"sglang 0.5.23 installed with {SGLANG} packages it pulled in" in drift.verdict[1]
    assert drift.verdict[2] == f"also installed: outlines (+{OUTLINES})"
    groups = {g["root"]: g["members"] for g in json.loads(drift_json(drift))["groups"]}
    assert (len(groups["sglang"]), len(groups["outlines"])) == (SGLANG, OUTLINES)
    text = "\n".join(_table(drift))
    assert f"with {SGLANG} packages it pulled in (" in text
    assert f"with {OUTLINES} packages it pulled in (" in text
    assert f"<summary>{SGLANG} packages sglang pulled in</summary>" in drift_html(drift)


def test_a_package_two_installs_pulled_in_is_folded_into_one_row(drift: Drift) -> None:
    """The rows' "folded into this row" counts add up to the summary's folded changes: a
    shared dependency is counted in the bigger install's row and named as there in the
    other's."""
    text = "\n".join(_table(drift))
    here = sum(int(n) for n in re.findall(r"(\d+) folded into this row", text))
    here += sum(
        len(g.members)
        for g in drift.groups
        if f"with {len(g.members)} packages it pulled in, folded into this row" in text
    )
    summary = next(line for line in text.splitlines() if line.startswith("drift from "))
    assert here == sum(_shown_and_folded(summary)[1].values())
    assert f"{len(OWN)} folded into this row, {len(SHARED)} into sglang's row" in text


def test_bisect_names_an_install_by_the_count_the_verdict_gives() -> None:
    found = {u.id: u for u in units(GOOD, BAD)}
    assert found["group:sglang"].label == (
        f"sglang and what it pulled in ({SGLANG - 2} of its {SGLANG} packages;"
        " 2 in the torch stack's unit)"
    )
    # The shared dependencies go with the bigger install, as the table folds them.
    assert set(SHARED) <= set(found["group:sglang"].packages)
    assert found["group:outlines"].label == (
        f"outlines and what it pulled in ({len(OWN)} of its {OUTLINES} packages;"
        f" {len(SHARED)} in sglang's unit)"
    )
