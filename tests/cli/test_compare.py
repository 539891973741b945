"""`envguard diff` and `envguard check` end to end on real venvs built offline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import POLLUTION
from envguard.cli import app
from factories import git, make_git_repo, uv_install

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def good_run(in_tmp: Path, good_venv: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A known-good run: venv, repo with a model script, a warm inductor cache, a snapshot."""
    repo = make_git_repo(in_tmp / "code", {"model.py": "def forward(x):\n    return x\n"})
    cache = in_tmp / "inductor"
    (cache / "fxgraph").mkdir(parents=True)
    for i in range(5):
        (cache / "fxgraph" / f"k{i}").write_bytes(b"compiled" * 100)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    code, _, err = invoke(
        "snapshot",
        "--python",
        str(good_venv),
        "--name",
        "good",
        "--repo",
        str(repo),
        "--file",
        str(repo / "model.py"),
        "--metric",
        "tok_s=21500",
    )
    assert code == 0, err
    return {"venv": good_venv, "repo": repo, "cache": cache}


def test_untouched_environment_has_no_drift(good_run: dict[str, Path]) -> None:
    code, out, err = invoke("diff", "good", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["changes"] == [] and doc["drift"] is False
    assert doc["metrics"] == {"tok_s": 21500}
    code, out, _ = invoke("diff")  # newest snapshot, table
    assert code == 0 and "no drift" in out and "tok_s=21500" in out


def test_what_the_live_probe_could_not_check_is_said_beside_the_verdict(
    good_run: dict[str, Path],
) -> None:
    """A RECORD gone since the snapshot: the live probe's warning (its files can no longer
    be checked) is said with the verdict, every time (a verdict kept as clean would drop
    it), and in the JSON document; it is no change, so the exit code is the changes'."""
    site = next(good_run["venv"].glob("lib/python3*/site-packages"))
    record = next(site.glob("*.dist-info/RECORD"))
    record.unlink()
    for _ in range(2):
        _, _, err = invoke("check", "good")
        assert "note: new warning: " in err and "no RECORD" in err, err
    code, out, _ = invoke("diff", "good", "--format", "json")
    doc = json.loads(out)
    assert any(n.startswith("new warning: ") and "no RECORD" in n for n in doc["notes"]), doc
    assert (code == 1) == doc["drift"]  # the notes move no exit code


def test_seed_drift_replayed(good_run: dict[str, Path], wheelhouse: Path) -> None:
    venv, repo = good_run["venv"], good_run["repo"]
    uv_install(venv, wheelhouse, *POLLUTION)
    uv_install(venv, wheelhouse, "torch==2.11.0+cu130", extra=["--reinstall-package", "torch"])
    shutil.rmtree(good_run["cache"])
    (repo / "model.py").write_text("def forward(x):\n    import pdb; return x * 0.5  # hack\n")
    git(repo, "commit", "-qam", "debugging")
    code, out, err = invoke("diff", "good", "--format", "json")
    assert code == 1, err
    found = {
        (c["section"], c["kind"], c["name"]): c["severity"] for c in json.loads(out)["changes"]
    }
    assert found[("packages", "variant_changed", "torch")] == "critical"
    assert found[("torch", "cuda", "cuda")] == "critical"
    assert found[("packages", "added", "sglang")] == "critical"
    assert found[("packages", "added", "flashinfer-python")] == "critical"
    assert found[("packages", "added", "orjson")] == "warning"
    assert found[("caches", "cold", str(good_run["cache"]))] == "warning"
    assert found[("files", "changed", str(repo / "model.py"))] == "critical"
    assert found[("repos", "head_moved", str(repo))] == "critical"
    # --fail-on decides the exit code; the report is the same
    assert invoke("diff", "good", "--fail-on", "never")[0] == 0
    code, out, _ = invoke("diff", "good", "--format", "markdown")
    assert code == 1 and "| packages | variant_changed | torch |" in out


def test_against_compares_two_snapshots_without_probing(
    good_run: dict[str, Path], wheelhouse: Path
) -> None:
    uv_install(good_run["venv"], wheelhouse, "transformers==4.47.0")
    assert invoke("snapshot", "--name", "later", "--python", str(good_run["venv"]))[0] == 0
    shutil.rmtree(good_run["venv"])  # no live environment needed
    code, out, _ = invoke("diff", "good", "--against", "later", "--format", "json")
    assert code == 1
    kinds = {(c["kind"], c["name"]) for c in json.loads(out)["changes"]}
    assert ("upgraded", "transformers") in kinds
    code, _, err = invoke("diff", "good")
    assert code == 2 and "interpreter no longer exists" in err


def test_github_format_writes_step_summary(
    good_run: dict[str, Path], wheelhouse: Path, monkeypatch: pytest.MonkeyPatch, in_tmp: Path
) -> None:
    uv_install(good_run["venv"], wheelhouse, "orjson==3.10.0")
    summary = in_tmp / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    code, out, _ = invoke("check", "good")
    assert code == 1
    assert "::warning title=envguard packages/added::orjson 3.10.0 added" in out
    assert "## envguard drift report" in summary.read_text()


def test_pyproject_policy_is_applied(
    good_run: dict[str, Path], wheelhouse: Path, in_tmp: Path
) -> None:
    uv_install(good_run["venv"], wheelhouse, "orjson==3.10.0")
    (in_tmp / "pyproject.toml").write_text('[tool.envguard]\nignore-packages = ["orjson"]\n')
    assert invoke("diff", "good")[0] == 0
    (in_tmp / "pyproject.toml").write_text('[tool.envguard]\nfail-on = "sometimes"\n')
    code, _, err = invoke("diff", "good")
    assert code == 2 and "fail-on" in err and "'sometimes'" in err
    (in_tmp / "pyproject.toml").write_text('[tool.envguard]\nignore-sections = ["bogus"]\n')
    code, _, err = invoke("diff", "good")
    assert code == 2 and "unknown section 'bogus'" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "not valid JSON"),
        ('{"schema_version": 1, "name": "trunc', "not valid JSON"),
        ('{"schema_version": 7}', "schema_version 7 is newer"),
        ("\x00\x01binary", "not valid JSON"),
    ],
)
def test_corrupt_snapshot_is_exit_2_one_line(in_tmp: Path, content: str, message: str) -> None:
    (in_tmp / "bad.json").write_text(content)
    for command in ("diff", "check", "show"):
        code, _, err = invoke(command, "bad.json")
        assert code == 2 and message in err and "Traceback" not in err
        assert err.splitlines()[0].startswith("error: bad.json")


def test_deleted_file_and_repo_are_drift_not_bad_input(good_run: dict[str, Path]) -> None:
    shutil.rmtree(good_run["repo"])  # the repo and the tracked file inside it
    code, out, err = invoke("diff", "good", "--format", "json")
    assert code == 1, err
    found = {(c["section"], c["kind"]): c["severity"] for c in json.loads(out)["changes"]}
    assert found[("files", "missing")] == "critical"
    assert found[("repos", "missing")] == "warning"


def test_recorded_interpreter_is_only_run_when_it_is_safe(
    good_run: dict[str, Path], in_tmp: Path
) -> None:
    data = json.loads((in_tmp / "snapshots" / "good.json").read_text())
    evil = in_tmp / "tools" / "evil"
    evil.parent.mkdir()
    evil.write_text("#!/bin/sh\ntouch pwned\n")
    evil.chmod(0o755)
    alias = in_tmp.parent / f"{in_tmp.name}-alias"  # a spelling from outside, same files
    alias.symlink_to(in_tmp)
    for executable, message in [
        (f"{alias}/tools/python", "inside this checkout"),
        (str(evil), "is not a plain python path"),
        (str(in_tmp / "tools" / "python"), "inside this checkout"),
        ("/proc/self/cwd/tools/python", "is not a plain python path"),
        (f"{in_tmp}/tools/../tools/python", "is not a plain python path"),
    ]:
        (in_tmp / "tools" / "python").write_text("#!/bin/sh\ntouch pwned\n")
        (in_tmp / "tools" / "python").chmod(0o755)
        data["interpreter"]["executable"] = executable
        (in_tmp / "pr.json").write_text(json.dumps(data))
        for command in ("diff", "check"):
            code, _, err = invoke(command, "pr.json")
            assert code == 2 and message in err and "--python" in err
    assert not (in_tmp / "pwned").exists()


def test_policy_values_of_the_wrong_type_are_exit_2(
    good_run: dict[str, Path], in_tmp: Path
) -> None:
    for text in (
        '[tool.envguard.severity]\n"caches.cold" = ["critical"]\n',
        "tool = 1\n",
        '[tool.envguard]\ncritical-packages = "torch"\n',
    ):
        (in_tmp / "pyproject.toml").write_text(text)
        code, _, err = invoke("diff", "good")
        assert code == 2 and err.startswith("error: ") and "Traceback" not in err


@pytest.mark.parametrize(
    "change",
    [{"schema_version": 99}, {"surprise": 1}, {"name": "bad\nname"}],
)
def test_plainly_shaped_but_invalid_snapshot_is_exit_2(
    good_run: dict[str, Path], in_tmp: Path, change: dict[str, object]
) -> None:
    data = json.loads((in_tmp / "snapshots" / "good.json").read_text())
    data.update(change)
    (in_tmp / "odd.json").write_text(json.dumps(data))
    code, _, err = invoke("diff", "odd.json")
    assert code == 2, err
    assert err.startswith("error: odd.json") and "Traceback" not in err


def test_deeply_nested_json_is_exit_2(in_tmp: Path) -> None:
    (in_tmp / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    for command in ("diff", "show"):
        code, _, err = invoke(command, "deep.json")
        assert code == 2 and "Traceback" not in err


def test_diff_builds_where_to_measure_once_and_passes_it_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The options --python, --via, --timeout, --allow, --root and --deep reach the API as one
    Measure: no part travels beside it."""
    from envguard.api import compare
    from envguard.snapshots.measure import Measure

    seen: dict[str, object] = {}

    def fake_diff(*args: object, **kwargs: object) -> None:
        seen.update(kwargs, args=args)
        raise SystemExit(0)

    monkeypatch.setattr(compare, "diff_result", fake_diff)  # api.diff's, as the CLI calls it
    argv = ["diff", "good", "--python", "/v/bin/python", "--via", "ssh gpu01", "--timeout", "30"]
    result = runner.invoke(app, [*argv, "--allow", "data", "--root", "/srv/co", "--deep"])
    assert result.exit_code == 0, result.output
    assert seen["measure"] == Measure(
        python="/v/bin/python", via="ssh gpu01", timeout=30.0, allow=("data",), root="/srv/co",
        deep=True,
    )  # fmt: skip
    # Beside it: the policy, and what the command loads while the probe works.
    assert set(seen) == {"args", "policy", "measure", "meanwhile"}


# What a diff that runs the engine loads (the sections with it); a clean answer told again, none.
HEAVY = ["envguard.compare.engine", "envguard.compare.sections", "pydantic"]
_LOADED_AT_EXIT = """
import atexit, sys
def said():
    heavy = ("pydantic", "envguard.compare.engine", "envguard.compare.sections")
    heavy = sorted(m for m in heavy if m in sys.modules)
    sys.stderr.write(f"LOADED {heavy}\\n")
atexit.register(said)
sys.argv = ["envguard", *sys.argv[1:]]
from envguard.__main__ import main
main()
"""


def _diff_in_a_new_process(
    *args: str, command: str = "diff", env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    import os
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _LOADED_AT_EXIT, command, *args],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def _settled() -> None:
    """Wait until the comparison's code is older than the 2 s within which a change is
    not vouched for (snapshots/clean.py): a clone tested at once."""
    import time

    import envguard

    package = Path(envguard.__file__).parent
    newest = max(f.stat().st_mtime for f in package.rglob("*.py"))
    time.sleep(max(0.0, newest + 2.1 - time.time()))


def _github_files(tmp: Path) -> dict[str, str]:
    """GitHub Actions' step summary and step outputs files, empty, by variable."""
    files = {"GITHUB_STEP_SUMMARY": tmp / "summary.md", "GITHUB_OUTPUT": tmp / "outputs.txt"}
    for path in files.values():
        path.write_text("")
    return {variable: str(path) for variable, path in files.items()}


def test_a_clean_diff_told_again_loads_no_model_and_says_the_same(
    good_run: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's clean answer for the same two documents is kept (compare.identical):
    the next diff of an unchanged environment says what the engine said, in every format
    but the HTML page (the JSON document, the Markdown report, GitHub's annotations, step
    summary and outputs: a CI gate's ``check --format github``), without pydantic or the
    engine; a drift after it is said in full."""
    from envguard.snapshots import clean

    github = _github_files(tmp_path)
    with monkeypatch.context() as engine_only:  # no kept answer is used: the engine's
        engine_only.setattr(clean, "known", lambda snapshot, live: False)
        code, first, err = invoke("diff", "good")
        assert code == 0 and "no drift" in first, err
        told = {fmt: invoke("diff", "good", "--format", fmt) for fmt in ("json", "markdown")}
        assert all(code == 0 for code, _, _ in told.values())
        gate = runner.invoke(app, ["check", "good", "--format", "github"], env=github)
        assert gate.exit_code == 0 and "no drift" in gate.stdout, gate.stderr
    files = {variable: Path(path).read_text() for variable, path in github.items()}
    assert "drift=false" in files["GITHUB_OUTPUT"] and "no drift" in files["GITHUB_STEP_SUMMARY"]
    # Kept by a process of its own: this one's comparison code may not be stamped (a
    # checkout younger than the stamp's 2 s, as a clone tested at once: snapshots/clean.py).
    _settled()
    assert _diff_in_a_new_process("good")[:2] == (0, first)
    code, again, err = _diff_in_a_new_process("good")
    assert (code, again) == (0, first), err
    assert "LOADED []" in err  # its exit code too: no change fails a policy (cli._exit)
    for fmt, (_, out, _) in told.items():
        code, again, err = _diff_in_a_new_process("good", "--format", fmt)
        assert (code, again) == (0, out), err
        assert "LOADED []" in err, fmt
    github = _github_files(tmp_path)
    code, again, err = _diff_in_a_new_process(
        "good", "--format", "github", command="check", env=github
    )
    assert (code, again) == (0, gate.stdout), err
    assert "LOADED []" in err
    assert {variable: Path(path).read_text() for variable, path in github.items()} == files
    (good_run["repo"] / "model.py").write_text("def forward(x):\n    return x * 0.5\n")
    code, out, err = _diff_in_a_new_process("good")
    assert code == 1 and "model.py" in out, err


def test_a_kept_answer_in_a_folder_others_can_write_is_not_used(
    good_run: dict[str, Path],
) -> None:
    import os

    from envguard.reading import envguard_cache

    _settled()
    assert _diff_in_a_new_process("good")[0] == 0  # kept (see the test above)
    folder = Path(str(envguard_cache(os.environ))) / "clean"
    assert any(folder.iterdir())
    folder.chmod(0o775)
    try:
        code, out, err = _diff_in_a_new_process("good")
        assert code == 0 and "no drift" in out
        assert f"LOADED {HEAVY}" in err
    finally:
        folder.chmod(0o700)
