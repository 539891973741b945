"""The HTML report in a real headless browser (Chromium): the page renders, the verdict is
visible, install groups fold into <details>, and nothing from a hostile snapshot runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.snapshots import store
from envguard.snapshots.models import Package
from factories import package, snapshot

runner = CliRunner()
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
# .ci/run installs Chromium; elsewhere the test says it needs one.
needs_browser = pytest.mark.skipif(
    BROWSER is None and os.environ.get("CI") != "true",
    reason="needs Chromium (.ci/run installs it)",
)
HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'


def _dump_dom(page: Path) -> str:
    assert BROWSER is not None, "Chromium is missing: .ci/run installs it"
    proc = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _hostile_pair(tmp_path: Path) -> tuple[Path, Path]:
    good = snapshot(
        [package("torch", "2.13.0+cpu"), package("numpy", "2.1.0")], metrics={"tok_s": 21500}
    )
    pulled = [package(f"dep{i}", "1.0") for i in range(5)]
    sglang = Package.model_validate(
        {**package("sglang", "0.5.23").model_dump(), "requires": [f"dep{i}" for i in range(5)]}
    )
    bad = snapshot(
        [package("torch", "2.14.1+cu130"), package("numpy", "1.26.4"), sglang, *pulled],
        note=HOSTILE,
    )
    data = json.loads(store.dumps(bad))
    data["env"] = {"NCCL_ALGO": HOSTILE}
    a, b = tmp_path / "good.json", tmp_path / "bad.json"
    a.write_text(store.dumps(good))
    b.write_text(json.dumps(data))
    return a, b


@needs_browser
def test_the_drift_page_renders_with_its_verdict_and_runs_nothing(tmp_path: Path) -> None:
    good, bad = _hostile_pair(tmp_path)
    result = runner.invoke(app, ["diff", str(good), "--against", str(bad), "--format", "html"])
    assert result.exit_code == 1, result.stderr
    page = tmp_path / "report.html"
    page.write_text(result.stdout)
    assert "<script>document" not in result.stdout and "<img src=x" not in result.stdout
    dom = _dump_dom(page)
    assert "<title>envguard drift: drift from good" in dom  # the title was not rewritten
    assert "pwned</title>" not in dom and "<script>document" not in dom
    assert 'id="verdict"' in dom and "torch 2.13.0+cpu -&gt; 2.14.1+cu130" in dom
    assert "<details><summary>5 packages sglang pulled in</summary>" in dom
    assert "&lt;img src=x" in dom  # shown as text


@needs_browser
def test_the_fleet_page_is_a_grid_of_hosts_by_difference(tmp_path: Path) -> None:
    paths = []
    for host, torch in (
        ("gpu01", "2.11.0+cu128"),
        ("gpu02", "2.11.0+cu128"),
        ("gpu03", "2.11.0+cu130"),
    ):
        path = tmp_path / f"{host}.json"
        path.write_text(store.dumps(snapshot([package("torch", torch)], host=host, name=host)))
        paths.append(str(path))
    result = runner.invoke(app, ["fleet", *paths, "--format", "html"])
    page = tmp_path / "fleet.html"
    page.write_text(result.stdout)
    dom = _dump_dom(page).replace("\n", "")
    assert "<th>gpu01</th><th>gpu02</th><th>gpu03</th>" in dom
    assert '<td class="odd">2.11.0+cu130</td>' in dom
    assert "odd ones out: gpu03" in dom


def _layout_at(page: Path, width: int, shot: Path | None = None) -> tuple[int, int]:
    """(the page's scrollWidth, the viewport's width) in Chromium at ``width`` px. The
    report's policy forbids scripts, so a copy without it carries a probe that writes both
    into the title; the layout is the report's own."""
    assert BROWSER is not None, "Chromium is missing: .ci/run installs it"
    text = page.read_text()
    policy_start = text.index('<meta http-equiv="Content-Security-Policy"')
    policy_end = text.index(">", policy_start) + 1
    probe = (
        "<script>addEventListener('load',()=>{document.title="
        "'layout '+document.documentElement.scrollWidth+' '+innerWidth})</script>"
    )
    measured = page.with_suffix(".measured.html")
    measured.write_text(
        text[:policy_start] + text[policy_end:].replace("</body>", probe + "</body>")
    )
    base = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    size = [f"--window-size={width},900", "--virtual-time-budget=2000"]
    proc = subprocess.run(
        [*base, *size, "--dump-dom", measured.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r"<title>layout (\d+) (\d+)</title>", proc.stdout)
    assert found, proc.stdout[:2000]
    if shot is not None:  # for a person to look at: `pytest --basetemp DIR`, then DIR/...
        subprocess.run(
            [*base, *size, f"--screenshot={shot}", page.as_uri()],
            capture_output=True,
            timeout=120,
            check=True,
        )
    return int(found.group(1)), int(found.group(2))


@needs_browser
@pytest.mark.slow
def test_long_cells_wrap_inside_a_1280_px_window(tmp_path: Path) -> None:
    """Paths, hashes and variable values with no space in them wrap in their cell: the
    page never scrolls sideways at a laptop's or a desktop's width."""
    long_path = "/mnt/shared/checkpoints/" + "a-very-long-run-name-" * 12 + "step-120000.pt"
    good = snapshot([package("torch", "2.13.0+cpu")])
    bad = snapshot([package("torch", "2.14.1+cu130"), package("x" * 90 + "-kernels", "1.0")])
    a, b = tmp_path / "good.json", tmp_path / "bad.json"
    a.write_text(store.dumps(good).replace('"env": {}', '"env": {"CKPT": "/old"}'))
    data = json.loads(store.dumps(bad))
    data["env"] = {"CKPT": long_path, "LD_LIBRARY_PATH": ":".join([long_path] * 4)}
    b.write_text(json.dumps(data))
    result = runner.invoke(app, ["diff", str(a), "--against", str(b), "--format", "html"])
    assert result.exit_code == 1, result.stderr
    assert long_path in result.stdout
    page = tmp_path / "report.html"
    page.write_text(result.stdout)
    for width in (1280, 1920):
        shot = tmp_path / f"report-{width}.png"
        scroll, viewport = _layout_at(page, width, shot=shot)
        assert viewport == width and scroll <= viewport, (width, scroll)
