"""What `check --lock` says: the lock's pin as expected and the environment's as actual in every
format, a verdict first, torch with its build label, GitHub's annotation limits, and two
--lock as old -> new."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.snapshots import store
from envguard.snapshots.models import TorchBuild
from factories import UV, make_torch_wheel, make_wheel, package, run, snapshot

runner = CliRunner()

# PyPI's CUDA wheel: the distribution says 2.14.1, torch itself 2.14.1+cu130.
TORCH = TorchBuild(version="2.14.1+cu130", cuda="13.0")
LOCK = "# pins\ntorch==2.13.0+cu128\nnumpy==2.0.0\nruff==0.6.0\n"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("GITHUB_WORKSPACE", "GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT", "GITHUB_ACTIONS"):
        monkeypatch.delenv(name, raising=False)
    good = snapshot(
        [package("torch", "2.14.1"), package("numpy", "2.1.0"), package("six", "1.16.0")],
        torch=TORCH,
    )
    (tmp_path / "good.json").write_text(store.dumps(good))
    (tmp_path / "requirements.txt").write_text(LOCK)
    return tmp_path


def check(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = runner.invoke(app, ["check", *args], env=env)
    return result.exit_code, result.output


def test_json_puts_the_lock_under_expected_and_names_torch_with_its_label(work: Path) -> None:
    code, out = check("good.json", "--lock", "requirements.txt", "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert (doc["expected"], doc["actual"]) == ("requirements.txt", "good")
    found = {(c["kind"], c["name"]): (c["expected"], c["actual"]) for c in doc["changes"]}
    assert found == {
        ("pin_differs", "torch"): ("2.13.0+cu128", "2.14.1+cu130"),
        ("pin_differs", "numpy"): ("2.0.0", "2.1.0"),
        ("not_in_lock", "six"): (None, "1.16.0"),
        ("not_installed", "ruff"): ("0.6.0", None),
    }
    assert doc["verdict"] == [
        "torch: the snapshot has 2.14.1+cu130, requirements.txt pins 2.13.0+cu128",
        "pins differ: numpy 2.1.0 (lock: 2.0.0)",
        "in the lock, not installed: ruff 0.6.0",
        "installed, not in the lock: six 1.16.0",
    ]


def test_markdown_rows_read_lock_then_environment(work: Path) -> None:
    code, out = check("good.json", "--lock", "requirements.txt", "--format", "markdown")
    assert code == 1
    assert "| packages | pin_differs | torch | 2.13.0+cu128 | 2.14.1+cu130 |" in out
    assert "| packages | not_installed | ruff | 0.6.0 |  |" in out
    assert "| packages | not_in_lock | six |  | 1.16.0 |" in out
    # The verdict comes before the tables, torch first.
    verdict = out.index("- torch: the snapshot has 2.14.1+cu130")
    assert verdict < out.index("| section |")


def test_the_step_summary_and_annotations_read_the_same_way(work: Path) -> None:
    summary = work / "summary.md"
    code, out = check(
        "good.json",
        "--lock",
        "requirements.txt",
        "--format",
        "github",
        env={"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_WORKSPACE": str(work)},
    )
    assert code == 1
    first = out.splitlines()[0]
    assert first.startswith("::notice title=envguard verdict::torch: the snapshot has 2.14.1+cu130")
    assert "| torch | 2.13.0+cu128 | 2.14.1+cu130 |" in summary.read_text()
    errors = [line for line in out.splitlines() if line.startswith("::error")]
    assert errors[0].startswith(
        "::error file=requirements.txt,line=2,title=envguard packages/pin_differs::torch:"
    )


def test_table_and_html_lead_with_the_verdict(work: Path) -> None:
    code, out = check("good.json", "--lock", "requirements.txt", "--format", "table")
    assert code == 1
    assert out.lstrip().startswith("torch: the snapshot has 2.14.1+cu130")
    code, page = check("good.json", "--lock", "requirements.txt", "--format", "html")
    assert code == 1 and "2.14.1+cu130" in page
    assert page.index("torch: the snapshot has") < page.index("2.13.0+cu128</td>")


def test_a_lock_pinning_the_build_label_matches_pypis_unlabelled_wheel(work: Path) -> None:
    (work / "r.txt").write_text("torch==2.14.1+cu130\nnumpy==2.1.0\nsix==1.16.0\n")
    code, out = check("good.json", "--lock", "r.txt")
    assert code == 0, out
    (work / "r.txt").write_text("torch==2.14.1+cu128\nnumpy==2.1.0\nsix==1.16.0\n")
    code, out = check("good.json", "--lock", "r.txt", "--format", "json")
    assert code == 1
    (torch,) = json.loads(out)["changes"]
    assert (torch["expected"], torch["actual"]) == ("2.14.1+cu128", "2.14.1+cu130")


def _many(work: Path) -> tuple[str, str]:
    """A snapshot and a lock that disagree on torch, 12 GPU-stack and 15 other packages."""
    gpu = [f"nvidia-lib{i:02d}-cu12" for i in range(12)]
    other = [f"pkg{i:02d}" for i in range(15)]
    snap = snapshot(
        [package("torch", "2.14.1"), *(package(n, "2.0") for n in gpu + other)], torch=TORCH
    )
    (work / "many.json").write_text(store.dumps(snap))
    lock = work / "locks" / "many.txt"
    lock.parent.mkdir()
    lock.write_text("torch==2.13.0+cu128\n" + "".join(f"{n}==1.0\n" for n in gpu + other))
    return "many.json", str(lock)


def test_github_keeps_within_ten_annotations_a_kind_worst_first(work: Path) -> None:
    summary = work / "summary.md"
    snap, lock = _many(work)  # an absolute path inside the workspace
    env = {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_WORKSPACE": str(work)}
    code, out = check(snap, "--lock", lock, "--format", "github", env=env)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("::notice title=envguard verdict::torch: the snapshot has")
    errors = [line for line in lines if line.startswith("::error")]
    warnings = [line for line in lines if line.startswith("::warning")]
    assert len(errors) == 9 and len(warnings) == 9
    assert "title=envguard packages/pin_differs::torch:" in errors[0]
    assert all("nvidia-lib" in e for e in errors[1:])
    assert all(e.startswith("::error file=locks/many.txt,line=") for e in errors)
    (rest,) = [line for line in lines if line.startswith("::notice title=envguard%3A more")]
    assert "10 more changes not annotated (4 critical, 6 warnings)" in rest
    assert "the step summary lists every change" in rest
    written = summary.read_text()
    assert all(f"| nvidia-lib{i:02d}-cu12 |" in written for i in range(12))
    assert all(f"| pkg{i:02d} |" in written for i in range(15))


def test_a_lock_outside_the_workspace_is_annotated_without_a_file(
    work: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "r.txt"
    elsewhere.write_text(LOCK)
    code, out = check(
        "good.json",
        "--lock",
        str(elsewhere),
        "--format",
        "github",
        env={"GITHUB_WORKSPACE": str(work)},
    )
    assert code == 1
    annotations = [line for line in out.splitlines() if line.startswith(("::error", "::warning"))]
    assert annotations and not any("file=" in line for line in annotations)


def test_snapshot_drift_on_github_keeps_the_same_limits(work: Path) -> None:
    names = [f"nvidia-lib{i:02d}-cu12" for i in range(14)]
    good = snapshot([package("torch", "2.13.0"), *(package(n, "1.0") for n in names)])
    bad = snapshot(
        [package("torch", "2.14.1"), *(package(n, "2.0") for n in names)], name="bad", torch=TORCH
    )
    (work / "good.json").write_text(store.dumps(good))
    (work / "bad.json").write_text(store.dumps(bad))
    code, out = check("good.json", "--against", "bad.json", "--format", "github")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("::notice title=envguard verdict::torch 2.13.0 -> 2.14.1+cu130")
    errors = [line for line in lines if line.startswith("::error")]
    assert len(errors) == 9
    assert "torch" in errors[0] and all("nvidia-lib" in e for e in errors[2:])
    (rest,) = [line for line in lines if line.startswith("::notice title=envguard%3A more")]
    assert "critical" in rest and "--format markdown lists every change" in rest


def test_two_locks_are_old_then_new(work: Path) -> None:
    (work / "new.txt").write_text("torch==2.14.1+cu130\nnumpy==2.0.0\n")
    code, out = check("--lock", "requirements.txt", "--lock", "new.txt", "--format", "json")
    assert code == 1, out
    doc = json.loads(out)
    assert (doc["expected"], doc["actual"]) == ("requirements.txt", "new.txt")
    found = {c["name"]: (c["kind"], c["expected"], c["actual"]) for c in doc["changes"]}
    assert found["torch"] == ("upgraded", "2.13.0+cu128", "2.14.1+cu130")
    assert found["ruff"] == ("removed", "0.6.0", None)
    assert doc["verdict"][0] == "torch 2.13.0+cu128 -> 2.14.1+cu130"
    assert doc["verdict"][1:] == ["other packages: 1 removed"]
    code, out = check("--lock", "requirements.txt", "--lock", "new.txt", "--lock", "x.txt")
    assert code == 2 and "--lock came 3 times" in out


def test_a_uv_lock_pins_torch_by_its_label(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real uv.lock of a CUDA build: PyPI-style torch (no label on the distribution) matches
    it; another build is named with its label on both sides."""
    wh = tmp_path / "wh"
    make_torch_wheel(wh, "2.14.1+cu130", "13.0")
    make_wheel(wh, "numpy", "2.1.0")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(
        '[project]\nname = "train"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n'
        'dependencies = ["torch==2.14.1+cu130", "numpy"]\n'
    )
    run([UV, "lock", "--quiet", "--offline", "--no-index", "--find-links", str(wh)], cwd=proj)
    monkeypatch.chdir(proj)
    same = snapshot([package("torch", "2.14.1"), package("numpy", "2.1.0")], torch=TORCH)
    (proj / "same.json").write_text(store.dumps(same))
    assert check("same.json", "--lock", "uv.lock")[0] == 0
    other = snapshot(
        [package("torch", "2.14.1"), package("numpy", "2.1.0")],
        torch=TorchBuild(version="2.14.1+cu128", cuda="12.8"),
    )
    (proj / "other.json").write_text(store.dumps(other))
    code, out = check("other.json", "--lock", "uv.lock", "--format", "json")
    assert code == 1
    doc = json.loads(out)
    (torch,) = doc["changes"]
    assert (torch["expected"], torch["actual"]) == ("2.14.1+cu130", "2.14.1+cu128")
    assert doc["verdict"] == ["torch: the snapshot has 2.14.1+cu128, uv.lock pins 2.14.1+cu130"]
