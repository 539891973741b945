"""A report from the far side of --via is untrusted: every forged, truncated, wrong-typed
or oversized one is one `error:` line naming the host and the field, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envguard.cli import app
from envguard.probe.payload import probe_payload
from factories import real_report as measured_report

runner = CliRunner()


@pytest.fixture(scope="module")
def real_report() -> dict[str, Any]:
    """What the real probe prints for this interpreter."""
    return measured_report()


def forged_host(tmp_path: Path, output: str, *, code: int = 0) -> str:
    """A --via prefix whose far side ignores the probe and prints ``output``."""
    (tmp_path / "answer").write_text(output)
    fake = tmp_path / "fake-ssh"
    fake.write_text(f"#!/bin/sh\ncat > /dev/null\ncat '{tmp_path / 'answer'}'\nexit {code}\n")
    fake.chmod(0o755)
    return f"{fake} gpu01"


def snapshot_via(via: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["snapshot", "--via", via, "--out", "-"])
    return result.exit_code, result.stdout, result.stderr


def _with(report: dict[str, Any], path: str, value: Any) -> str:
    doc = json.loads(json.dumps(report))
    keys = path.split(".")
    target = doc
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[keys[-1]] = value
    return json.dumps(doc)


def test_the_real_report_validates(tmp_path: Path, real_report: dict[str, Any]) -> None:
    code, out, err = snapshot_via(forged_host(tmp_path, json.dumps(real_report)))
    assert code == 0, err
    assert json.loads(out)["interpreter"]["executable"] == real_report["interpreter"]["executable"]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("packages", [], None),  # valid shape, but files/caches missing below
        ("packages", "not-a-list", "packages"),
        ("host", "gpu01\nerror: fake line", "host"),
        ("host", "a/b", "host"),
        ("interpreter.version", 311, "interpreter.version"),
        ("interpreter.is_venv", "yes", "interpreter.is_venv"),
        ("accelerator.count", "8", "accelerator.count"),
        ("env", {"HF_TOKEN": ["x"]}, "env.HF_TOKEN"),
        ("env", {"TORCH_\x1bX": "1"}, "env, a name: not one line of text"),
        ("packages.0.version", "1.0\x1b[2J", "packages.0.version"),
        ("caches", {"path": "/"}, "caches"),
        ("warnings", [1, 2], "warnings.0"),
        ("torch", "2.11", "torch"),
        ("unexpected", 1, "unexpected"),
    ],
)
def test_forged_fields_are_one_line_exit_2(
    tmp_path: Path, real_report: dict[str, Any], field: str, value: Any, expected: str | None
) -> None:
    doc = json.loads(_with(real_report, field, value))
    if expected is None:  # {"packages": []} alone: the rest is missing
        doc = {"probe_version": real_report["probe_version"], "packages": []}
        expected = "field required"
    code, out, err = snapshot_via(forged_host(tmp_path, json.dumps(doc)))
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --via "), err
    assert "gpu01" in lines[0] and expected in lines[0] and "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "the prefix passed no stdin"),  # exit 0 and not a word: no program arrived
        ('{"packages": [', "did not answer the probe"),
        # An id of its own: pytest before 9 names the test by the whole 200 kB string, which
        # then reaches the fake ssh in PYTEST_CURRENT_TEST, over Linux's 128 KiB for one
        # variable (E2BIG, "Argument list too long").
        pytest.param("[" * 100_000 + "]" * 100_000, "did not answer the probe", id="nested-deep"),
        ('{"error": {"kind": "failed", "message": "OSError: disk\\u001b[2J gone"}}', "disk"),
        ('{"error": "x"}', "malformed error object"),
    ],
)
def test_truncated_nested_and_error_objects(tmp_path: Path, output: str, message: str) -> None:
    code, _, err = snapshot_via(forged_host(tmp_path, output))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert "\x1b" not in err


def test_another_probe_version_is_refused_with_a_hint(
    tmp_path: Path, real_report: dict[str, Any]
) -> None:
    code, _, err = snapshot_via(forged_host(tmp_path, _with(real_report, "probe_version", 1)))
    assert code == 2
    assert "probe report version 1, expected" in err and "hint: " in err


def test_a_failing_prefix_keeps_its_own_words(tmp_path: Path) -> None:
    code, _, err = snapshot_via(forged_host(tmp_path, "", code=255))
    assert code == 2 and "failed (exit 255)" in err


def test_the_probe_reports_its_own_failure_as_data(tmp_path: Path) -> None:
    """A probe that fails on the target sends a JSON error object, not a traceback."""
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-"],
        input=probe_payload({"caches": "not-a-list"}),
        capture_output=True,
        text=True,
        check=False,
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["error"]["kind"] == "failed"
    assert "Traceback" not in proc.stderr


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzzed_reports_become_a_snapshot_or_one_line(data: Any) -> None:
    """Any field of a real report (top level, a package's, the interpreter's) replaced by
    any JSON value: a snapshot, or a ProbeError of one line; never another exception."""
    from envguard.errors import ProbeError
    from envguard.probe.report import parse_report
    from envguard.snapshots.capture import snapshot_from_report
    from envguard.snapshots.request import CaptureRequest

    report = measured_report()
    where = data.draw(st.sampled_from(["top", "package", "interpreter"]))
    holder = report
    if where == "package" and report["packages"]:
        holder = report["packages"][data.draw(st.integers(0, len(report["packages"]) - 1))]
    elif where == "interpreter":
        holder = report["interpreter"]
    key = data.draw(st.sampled_from(sorted(holder)) | st.text(max_size=6))
    holder[key] = data.draw(_VALUES)
    try:
        raw = json.dumps(report).encode()
    except ValueError:
        return
    try:
        parsed = parse_report(raw, label="host", returncode=0, stderr_tail="")
        snapshot_from_report(parsed, CaptureRequest(python=sys.executable, name="fuzz"))
    except ProbeError as exc:
        assert "\n" not in exc.message
    except Exception as exc:  # a report that validated but does not fit a snapshot
        from pydantic import ValidationError

        assert isinstance(exc, ValidationError), repr(exc)  # finish_capture makes it one line
