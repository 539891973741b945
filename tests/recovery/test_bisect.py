"""envguard bisect: names the install that broke the run, finds two changes that only break
it together, and says so when the good environment is bad too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import GOOD, POLLUTION
from factories import git, uv_install

# The stand-in benchmark: slow when the inference stack is importable (and, with INTERACT,
# only when transformers was upgraded too).
BENCH = """\
import importlib.metadata as md, importlib.util, os, sys
slow = importlib.util.find_spec("sglang") is not None
if os.environ.get("INTERACT"):
    slow = slow and md.version("transformers") == "4.47.0"
if os.environ.get("ALWAYS_SLOW"):
    slow = True
print("tok_s=%d" % (4300 if slow else 21500))
"""


@pytest.fixture
def polluted(tmp_path: Path, venv_factory: Callable[..., Path], wheelhouse: Path) -> Path:
    good = venv_factory("good", *GOOD)
    done = subprocess.run(
        [sys.executable, "-m", "envguard", "snapshot", "--python", str(good), "--name", "good"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    bad_reqs = [r for r in GOOD if not r.startswith("transformers")]
    venv_factory("bad", *bad_reqs, "transformers==4.47.0", *POLLUTION)
    (tmp_path / "bench.py").write_text(BENCH)
    return tmp_path


def bisect(
    root: Path, wheelhouse: Path, *extra: str, run: str = "python bench.py", **env: str
) -> Any:
    out = subprocess.run(
        [
            sys.executable, "-m", "envguard", "bisect", "good", "--python", str(root / "bad"),
            "--run", run, "--metric", "tok_s", "--min", "20000",
            "--no-index", "--find-links", str(wheelhouse), "--offline", "--format", "json",
            *extra,
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
    )  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr
    return out


def test_bisect_names_the_inference_stack_in_few_builds(polluted: Path, wheelhouse: Path) -> None:
    out = bisect(polluted, wheelhouse)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert [c["id"] for c in report["culprits"]] == ["package:sglang"], report
    from pydantic import TypeAdapter

    from envguard.recovery.bisect import BisectReport

    TypeAdapter(BisectReport).validate_python(report)  # the published schema's model
    units = len(report["units"])
    assert len(report["steps"]) <= 2 * (units - 1).bit_length() + 3
    assert report["steps"][0] == {**report["steps"][0], "units": [], "result": "good"}
    assert "run 1 of at most 30: none (the good environment) -> good (tok_s=21500)" in out.stderr
    assert out.stderr.startswith("bisect: 4 changes to try; about 7 runs for a single culprit")


def test_bisect_finds_two_changes_that_only_break_it_together(
    polluted: Path, wheelhouse: Path
) -> None:
    out = bisect(polluted, wheelhouse, INTERACT="1")
    report = json.loads(out.stdout)
    assert sorted(c["id"] for c in report["culprits"]) == [
        "package:sglang",
        "package:transformers",
    ], report


def test_without_repo_a_bad_good_environment_points_outside_but_clears_nothing(
    polluted: Path, wheelhouse: Path
) -> None:
    """The good environment runs bad with today's code: something outside it is a cause,
    but the drifted environment was never run apart from that code, so it is not cleared."""
    out = bisect(polluted, wheelhouse, ALWAYS_SLOW="1")
    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["culprits"] == []
    assert report["outcome"] == "outside_the_environment"
    assert report["verdict"].startswith(
        "the good snapshot's exact environment runs bad with today's code"
    )
    assert "not the cause" not in report["verdict"] and "--repo" in report["verdict"]
    assert len(report["steps"]) == 1
    assert any("sglang" in line for line in report["other_drift"]), report["other_drift"]


@pytest.mark.slow
def test_resume_reuses_the_logged_runs(polluted: Path, wheelhouse: Path) -> None:
    first = json.loads(bisect(polluted, wheelhouse).stdout)
    log = Path(polluted / first["log"])
    lines = log.read_text().splitlines()
    again = bisect(polluted, wheelhouse, "--resume")
    assert json.loads(again.stdout)["culprits"] == first["culprits"]
    assert log.read_text().splitlines() == lines  # nothing was built again


@pytest.mark.slow
def test_resume_never_reuses_an_answer_for_units_that_hold_other_packages(
    polluted: Path, wheelhouse: Path
) -> None:
    """A log's answers are for the packages its units held then: a log from an envguard
    that grouped them otherwise (or wrote no record of it) is run again, not trusted."""
    first = json.loads(bisect(polluted, wheelhouse).stdout)
    log = Path(polluted / first["log"])
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(len(step["contents"]) == 16 for step in steps)
    log.write_text("".join(json.dumps({**s, "contents": None}) + "\n" for s in steps))
    again = bisect(polluted, wheelhouse, "--resume")
    assert json.loads(again.stdout)["culprits"] == first["culprits"]
    assert len(log.read_text().splitlines()) > len(steps)  # built and run again


def snapshot_with_repo(good: Path, code: Path, *, bench: str, model: str) -> Path:
    """``code``: a repo of bench.py and model.py, committed ("fast model") and recorded
    with the venv ``good`` in the snapshot ``good`` (saved in ``code``)."""
    code.mkdir()
    (code / "bench.py").write_text(bench)
    (code / "model.py").write_text(model)
    git(code, "init", "-q")
    git(code, "add", "-A")
    git(code, "commit", "-qm", "fast model")
    snap = [sys.executable, "-m", "envguard", "snapshot", "--python", str(good), "--name", "good"]
    done = subprocess.run([*snap, "--repo", str(code)], cwd=code, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return code


def test_a_slow_commit_is_named_when_the_environment_is_not_the_cause(
    tmp_path: Path, venv_factory: Callable[..., Path], wheelhouse: Path
) -> None:
    good = venv_factory("good", *GOOD)
    code = snapshot_with_repo(
        good,
        tmp_path / "code",
        bench="import model\nprint('tok_s=%d' % model.speed())\n",
        model="def speed():\n    return 21500\n",
    )
    for i, speed in enumerate([21500, 4300, 4300, 4300]):
        (code / "model.py").write_text(f"def speed():\n    return {speed}  # v{i}\n")
        git(code, "commit", "-qam", f"change {i}" + (" (the race)" if i == 1 else ""))
    before = (git(code, "rev-parse", "HEAD"), git(code, "status", "--porcelain", "-uno"))
    out = subprocess.run(
        [
            sys.executable, "-m", "envguard", "bisect", "good", "--python", str(good),
            "--run", "python bench.py", "--metric", "tok_s", "--min", "20000",
            "--repo", str(code), "--no-index", "--find-links", str(wheelhouse), "--offline",
            "--format", "json",
        ],
        cwd=code, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    verdict = json.loads(out.stdout)["verdict"]
    assert verdict.startswith("the environment is not the cause"), verdict
    assert "the first bad commit: " in verdict and "change 1 (the race)" in verdict, verdict
    after = (git(code, "rev-parse", "HEAD"), git(code, "status", "--porcelain", "-uno"))
    assert after == before  # the user's checkout was never touched
    assert git(code, "worktree", "list").count("\n") == 0  # the worktree is gone


@pytest.mark.slow
def test_a_venv_edited_in_place_is_never_cleared(
    tmp_path: Path, venv_factory: Callable[..., Path], wheelhouse: Path
) -> None:
    """Same packages, same versions, but a file of one edited in site-packages: every run
    is a build from pins, which leaves the edit out, so no run can clear that environment."""
    good = venv_factory("good", *GOOD)
    code = snapshot_with_repo(
        good,
        tmp_path / "code",
        bench="import model\nprint('tok_s=%d' % model.speed())\n",
        model="def speed():\n    return 21500\n",
    )
    (code / "model.py").write_text("def speed():\n    return 4300\n")
    git(code, "commit", "-qam", "the race")
    target = next(good.glob("lib/python*/site-packages/nvidia_nccl_cu12/__init__.py"))
    data = target.read_bytes()
    target.unlink()  # a file of its own: uv hardlinked it to the suite's cache
    target.write_bytes(data + b"# debugging patch\n")
    out = subprocess.run(
        [
            sys.executable, "-m", "envguard", "bisect", "good", "--python", str(good),
            "--run", "python bench.py", "--metric", "tok_s", "--min", "20000",
            "--repo", str(code), "--no-index", "--find-links", str(wheelhouse), "--offline",
            "--format", "json",
        ],
        cwd=code, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    report = json.loads(out.stdout)
    assert report["outcome"] == "undecided", report["verdict"]
    assert report["verdict"].startswith("the packages and variables are not the cause"), report
    assert "1 file modified in place" in report["verdict"]
    assert "`envguard restore` puts them back" in report["verdict"]
    assert "the first bad commit: " in report["verdict"] and "the race" in report["verdict"]


# The incident's shape: sglang pulled in torch +cu130 (4,300 tok/s on its own) and, in the
# same weeks, a commit monkey-patched attention (4,300 tok/s on its own too). MODE says
# which of the two the stand-in benchmark feels.
INCIDENT_BENCH = """\
import importlib.metadata as md, importlib.util, os, sys, model
mode = os.environ.get("MODE", "both")
env_slow = md.version("torch").endswith("+cu130") and mode in ("both", "env", "flaky")
if mode == "flashinfer":  # a check keyed on one package sglang pulled in
    env_slow = importlib.util.find_spec("flashinfer_python") is not None
code_slow = model.PATCHED and mode in ("both", "code", "flaky")
if mode == "flaky" and env_slow and not code_slow:
    sys.exit(125)  # this run cannot be judged (a node fell over)
print("tok_s=%d" % (4300 if env_slow or code_slow else 21500))
"""


@pytest.fixture
def incident(tmp_path: Path, venv_factory: Callable[..., Path], wheelhouse: Path) -> Path:
    """``code/``: a repo whose snapshot commit is fast, then 'tidy', 'monkey-patch
    attention' (slow), 'log'; ``good`` is the snapshot's venv, ``bad`` has sglang, which
    pulled in torch +cu130 and flashinfer; ``wheels/``: the suite's wheels and that sglang."""
    import shutil

    from envguard.testing import make_wheel

    wheels = tmp_path / "wheels"
    shutil.copytree(wheelhouse, wheels)
    pins = ["torch==2.11.0+cu130", "flashinfer-python==0.2.0"]
    make_wheel(wheels, "sglang", "0.4.1", requires=pins)
    good = venv_factory("good", *GOOD)
    code = snapshot_with_repo(
        good, tmp_path / "code", bench=INCIDENT_BENCH, model="PATCHED = False\n"
    )
    for subject, patched in [("tidy", False), ("monkey-patch attention", True), ("log", True)]:
        (code / "model.py").write_text(f"PATCHED = {patched}  # {subject}\n")
        git(code, "commit", "-qam", subject)
    bad = venv_factory("bad")
    uv_install(bad, wheels, *GOOD[1:], "sglang==0.4.1")
    return tmp_path


def bisect_repo(root: Path, *extra: str, mode: str) -> Any:
    out = subprocess.run(
        [
            sys.executable, "-m", "envguard", "bisect", "good", "--python", str(root / "bad"),
            "--run", "python bench.py", "--metric", "tok_s", "--min", "20000",
            "--repo", str(root / "code"), "--no-index", "--find-links", str(root / "wheels"),
            "--offline", *extra,
        ],
        cwd=root / "code", capture_output=True, text=True, timeout=600,
        env={**os.environ, "MODE": mode},
    )  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr
    return out


TORCH_SWAP = "torch 2.11.0+cu128 -> 2.11.0+cu130, pulled in by sglang"


@pytest.mark.slow
def test_a_polluted_venv_and_a_bad_commit_are_both_named(incident: Path) -> None:
    """The incident: the good environment runs bad with today's code, and so does the
    polluted one at the snapshot's commit. Both causes are named, each proven by a run."""
    code = incident / "code"
    before = (git(code, "rev-parse", "HEAD"), git(code, "status", "--porcelain", "-uno"))
    out = bisect_repo(incident, "--format", "json", mode="both")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    from pydantic import TypeAdapter

    from envguard.recovery.bisect import BisectReport

    TypeAdapter(BisectReport).validate_python(report)  # the published schema's model
    assert report["outcome"] == "both"
    assert [c["id"] for c in report["culprits"]] == ["torch"], report
    assert report["commit"]["subject"] == "monkey-patch attention"
    assert report["verdict"].startswith(
        f"two causes: the environment ({TORCH_SWAP}) and commit"
        f" {report['commit']['short']} 'monkey-patch attention'"
    ), report["verdict"]
    assert "not the cause" not in report["verdict"]
    # every drift is listed: the torch build, the installs (the path of the venv too)
    drift = "\n".join(report["other_drift"])
    assert "2.11.0+cu130" in drift and "sglang" in drift and "flashinfer-python" in drift
    first = report["commit"]["sha"][:12]
    good_head = git(code, "rev-list", "--max-parents=0", "HEAD")[:12]
    said = {tuple(sorted(s["units"])): s["result"] for s in report["steps"]}
    assert said[()] == "bad"  # the good environment with today's code
    assert said[(f"commit:{good_head}",)] == "good"  # ... at the snapshot's commit
    assert said[(f"commit:{first}",)] == "bad"  # ... at the culprit
    polluted = tuple(sorted([*(u["id"] for u in report["units"]), f"commit:{good_head}"]))
    assert said[polluted] == "bad"  # the drifted environment at the snapshot's commit
    # 3 runs that decide, 1-2 for 3 commits, a few for 3 units; one build per environment
    assert len(report["steps"]) <= 10 and report["installs"] < len(report["steps"])
    after = (git(code, "rev-parse", "HEAD"), git(code, "status", "--porcelain", "-uno"))
    assert after == before  # the user's checkout was never touched
    assert git(code, "worktree", "list").count("\n") == 0  # the worktree is gone


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "verdict"),
    [
        ("code", "the environment is not the cause; the drifted environment runs good at"),
        ("env", f"it is: {TORCH_SWAP}"),
        ("flashinfer", "it is: flashinfer-python added (0.2.0), pulled in by sglang"),
    ],
)
def test_with_repo_one_cause_alone_is_still_named_alone(
    incident: Path, mode: str, verdict: str
) -> None:
    out = bisect_repo(incident, mode=mode)
    assert out.returncode == 0, out.stdout + out.stderr
    said = out.stdout.splitlines()[0]
    assert said.startswith(f"bisect good -> good-live: {verdict}"), out.stdout
    if mode == "code":
        assert "the first bad commit: " in said and "monkey-patch attention" in said
    else:
        assert "commit" not in said
    assert "also drifted: torch" in out.stdout or "2.11.0+cu130" in out.stdout
    assert re.search(r"^\d+ runs in \d+ builds? of the scratch venv;", out.stdout, re.M)


@pytest.mark.slow
def test_an_uncommitted_change_is_named_when_the_commits_run_good(incident: Path) -> None:
    """Today's code is the checkout with its uncommitted changes; HEAD is run before any
    commit is blamed for what only the checkout does."""
    code = incident / "code"
    (code / "model.py").write_text("PATCHED = False  # reverted\n")
    git(code, "commit", "-qam", "revert the patch")
    (code / "model.py").write_text("PATCHED = True  # a local hack\n")
    out = bisect_repo(incident, "--format", "json", mode="code")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["outcome"] == "not_the_environment" and report["commit"] is None
    assert report["verdict"].endswith(
        "; the uncommitted changes in the checkout (its committed code runs good in the good"
        " environment)"
    ), report["verdict"]


@pytest.mark.slow
def test_a_polluted_venv_that_cannot_be_judged_at_the_good_commit_is_not_cleared(
    incident: Path,
) -> None:
    """The flaky judge: the polluted venv at the snapshot's commit exits 125 (skip). The
    commit is still found, the environment is neither blamed nor cleared, and exit 1."""
    out = bisect_repo(incident, "--format", "json", mode="flaky")
    assert out.returncode == 1, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["outcome"] == "undecided" and report["culprits"] == []
    assert report["commit"]["subject"] == "monkey-patch attention"
    assert "whether the environment is a cause too is undecided" in report["verdict"]
    assert "not the cause" not in report["verdict"]


@pytest.mark.slow
def test_a_signal_stops_the_check_and_removes_the_scratch_venv(
    polluted: Path, wheelhouse: Path
) -> None:
    import signal
    import time

    tmp = polluted / "tmp"
    tmp.mkdir()
    (polluted / "slow.py").write_text(
        "import time; print('started', flush=True); time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "envguard", "bisect", "good", "--python", str(polluted / "bad"),
            "--run", "python slow.py", "--no-index", "--find-links", str(wheelhouse), "--offline",
        ],
        cwd=polluted, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )  # fmt: skip
    with proc:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(tmp.glob("envguard-bisect-*/venv/bin")):
            time.sleep(0.1)
        time.sleep(2)  # the check is running
        proc.send_signal(signal.SIGTERM)
        try:
            _out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == "error: interrupted (SIGTERM)"
    assert list(tmp.iterdir()) == []  # the scratch venv is gone


def test_a_cold_compile_cache_is_a_unit_and_can_be_the_culprit(
    tmp_path: Path, venv_factory: Callable[..., Path], wheelhouse: Path
) -> None:
    import shutil

    good = venv_factory("good", *GOOD)
    cache = tmp_path / "inductor"
    (cache / "fx").mkdir(parents=True)
    (cache / "fx" / "graph.bin").write_bytes(b"kernel" * 1000)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    snap = [sys.executable, "-m", "envguard", "snapshot", "--python", str(good), "--name", "good"]
    done = subprocess.run([*snap, "--keep-cache"], cwd=tmp_path, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    shutil.rmtree(cache)  # the compile cache was deleted: the first steps recompile
    (tmp_path / "bench.py").write_text(
        "import os\n"
        "warm = os.listdir(os.environ['TORCHINDUCTOR_CACHE_DIR'])\n"
        "print('tok_s=%d' % (21500 if warm else 4300))\n"
    )
    out = subprocess.run(
        [
            sys.executable, "-m", "envguard", "bisect", "good", "--python", str(good),
            "--run", "python bench.py", "--metric", "tok_s", "--min", "20000",
            "--no-index", "--find-links", str(wheelhouse), "--offline", "--format", "json",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert [c["id"] for c in report["culprits"]] == ["cache:inductor"], report
    assert not cache.exists()  # the user's (deleted) cache was never recreated by bisect


def test_a_check_that_leaves_a_daemon_behind_is_judged_and_not_waited_for(
    tmp_path: Path,
) -> None:
    from envguard.recovery.bisect import Check, Verdict, judge, run_check

    script = tmp_path / "daemon.py"
    script.write_text(
        "import os, subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(15)'],"
        " start_new_session=True)\n"
        "print('tok_s=21500')\n"
    )
    check = Check(argv=(sys.executable, str(script)), timeout=30, metric="tok_s", minimum=2e4)
    import time

    started = time.monotonic()
    code, out = run_check(check, Path(sys.prefix), dict(os.environ), tmp_path)
    assert time.monotonic() - started < 10
    assert judge(check, code, out) == Verdict("good", 21500.0)
    nan = Check(argv=("x",), metric="loss", maximum=1.0)
    assert judge(nan, 0, '{"loss": NaN}').result == "bad"


@pytest.mark.slow
def test_resume_never_reuses_the_results_of_another_check(polluted: Path, wheelhouse: Path) -> None:
    first = json.loads(bisect(polluted, wheelhouse).stdout)
    (polluted / "other.py").write_text("print('tok_s=21500')\n")
    again = bisect(polluted, wheelhouse, "--resume", run="python other.py")
    report = json.loads(again.stdout)
    assert report["log"] != first["log"] and report["culprits"] == []


def test_a_bad_environment_that_crashes_on_import_is_bisected_for_the_crash(
    polluted: Path, wheelhouse: Path
) -> None:
    """The commonest breakage: the polluted venv no longer imports. An import error is a
    skip for a candidate in general, but when the bad endpoint itself crashes that way, the
    crash is what is hunted, and the install behind it is named."""
    (polluted / "bench.py").write_text(
        "import importlib.util\n"
        "if importlib.util.find_spec('sglang'):\n"
        "    raise ImportError('cannot import name flash_attn from torch')\n"
        "print('tok_s=21500')\n"
    )
    out = bisect(polluted, wheelhouse)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert [c["id"] for c in report["culprits"]] == ["package:sglang"], report
    assert report["verdict"].startswith("the bad environment crashes on import (ImportError")
    assert "-> skip (ImportError: cannot import name flash_attn" in out.stderr


@pytest.mark.slow
def test_max_steps_stops_with_exit_1_and_resume_goes_on_without_building_again(
    polluted: Path, wheelhouse: Path
) -> None:
    short = bisect(polluted, wheelhouse, "--max-steps", "3")
    assert short.returncode == 1, short.stdout + short.stderr
    first = json.loads(short.stdout)
    assert first["complete"] is False and len(first["steps"]) == 3
    assert first["verdict"].startswith("not narrowed down within 3 runs: ")
    assert "--resume and a larger --max-steps" not in short.stderr  # json: no hint line
    log = polluted / first["log"]
    logged = log.read_text().splitlines()
    assert len(logged) == 3
    done = bisect(polluted, wheelhouse, "--resume")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["complete"] is True
    assert [c["id"] for c in report["culprits"]] == ["package:sglang"]
    again = log.read_text().splitlines()
    assert again[:3] == logged  # the three logged builds were not run again
    built_now = [s for s in report["steps"] if not s["logged"]]
    assert len(again) == 3 + len(built_now) and len(built_now) < len(report["steps"])
    assert "from the log: none (the good environment) -> good" in done.stderr
    assert (polluted / ".envguard" / ".gitignore").read_text().endswith("*\n")  # never untracked
    fresh = bisect(polluted, wheelhouse)  # no --resume: a new log, not appended to the old
    assert len(log.read_text().splitlines()) == len(json.loads(fresh.stdout)["steps"])


@pytest.mark.parametrize(
    "run", ["python bench.py | tee out", "python bench.py > out", "FOO=1 python bench.py"]
)
def test_shell_syntax_without_shell_is_refused_before_anything_is_built(
    polluted: Path, run: str
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "envguard", "bisect", "good", "--run", run],
        cwd=polluted, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert "shell syntax" in out.stderr and "--shell" in out.stderr
    assert not (polluted / ".envguard").exists()


def test_a_bad_snapshot_that_cannot_be_installed_is_refused_before_any_build(
    polluted: Path,
) -> None:
    good = json.loads((polluted / "snapshots" / "good.json").read_text())
    bad = {**good, "name": "bad"}
    bad["packages"] = [*good["packages"], {**good["packages"][0], "name": "evil",
                       "version": "1.0; import os", "fingerprint": None}]  # fmt: skip
    (polluted / "bad.json").write_text(json.dumps(bad))
    out = subprocess.run(
        [sys.executable, "-m", "envguard", "bisect", "good", "--bad", "bad.json",
         "--run", "python bench.py"],
        cwd=polluted, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "step 1" not in out.stderr
    assert not (polluted / ".envguard").exists()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("tok_s=inf", "tok_s is inf"),
        ("tok_s: Infinity", "tok_s is inf"),
        ("tok_s=-inf", "tok_s is -inf"),
        ("tok_s=1e309", "tok_s is inf"),
        ("tok_s=nan", "tok_s is NaN"),
        ('{"tok_s": Infinity}', "tok_s is inf"),
        ('{"tok_s": -Infinity}', "tok_s is -inf"),
        ('{"tok_s": 1e309}', "tok_s is inf"),
        ('{"tok_s": NaN}', "tok_s is NaN"),
    ],
)
def test_a_metric_that_is_not_finite_is_bad_in_every_form(text: str, why: str) -> None:
    """A throughput of inf (a timer that read 0) passes any --min; a NaN loss is the classic
    regression: neither is a measurement, and each form is judged alike."""
    from envguard.recovery.bisect import Check, Verdict, judge

    for bound in ({"minimum": 2e4}, {"maximum": 1.0}):
        check = Check(argv=("x",), metric="tok_s", **bound)
        assert judge(check, 0, f"started\n{text}\n") == Verdict("bad", why=why), (text, bound)


def test_a_json_integer_past_float_range_is_bad_not_a_traceback() -> None:
    """`{"tok_s": 1000...0}` (400 digits) is an int json reads, and float() of it raised
    OverflowError out of judge(): the check's output is the commit's to print."""
    from envguard.recovery.bisect import Check, Verdict, judge

    huge = "1" + "0" * 400
    for bound in ({"minimum": 2e4}, {"maximum": 1.0}):
        check = Check(argv=("x",), metric="tok_s", **bound)
        assert judge(check, 0, f'{{"tok_s": {huge}}}\n') == Verdict("bad", why="tok_s is inf")
        assert judge(check, 0, f'{{"tok_s": -{huge}}}\n') == Verdict("bad", why="tok_s is -inf")


def test_a_logged_metric_past_float_range_is_passed_over(tmp_path: Path) -> None:
    """A forged line in a resumed log (the log folder is in the checkout) with a 400-digit
    metric: math.isfinite() raised OverflowError; passed over like any damaged line."""
    from envguard.recovery.bisect import read_log

    log = tmp_path / "log.jsonl"
    good = {"units": ["a"], "result": "good", "metric": 1.5}
    log.write_text(
        '{"units": ["b"], "result": "good", "metric": 1' + "0" * 400 + "}\n" + json.dumps(good)
    )
    steps = read_log(log)
    assert [s.units for s in steps] == [["a"]]


@pytest.mark.parametrize("link", [".envguard", ".envguard/bisect"])
def test_a_planted_link_for_the_log_folder_is_refused(
    polluted: Path, wheelhouse: Path, link: str
) -> None:
    """A checkout can commit `.envguard` (or `.envguard/bisect`) as a symlink leading
    anywhere: bisect would write its log there. Refused: one line, exit 2."""
    outside = polluted / "outside"
    outside.mkdir()
    (polluted / link).parent.mkdir(exist_ok=True)
    (polluted / link).symlink_to(outside)
    out = bisect(polluted, wheelhouse)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: {link}: a symlink; bisect writes its log only into a folder of its own"
    ]
    assert list(outside.iterdir()) == []


@pytest.mark.slow
def test_a_sigkilled_bisect_leaves_scratch_the_next_run_removes(
    polluted: Path, wheelhouse: Path
) -> None:
    """SIGKILL runs no clean-up: the scratch venv stays in $TMPDIR. The next bisect removes
    it (its owner is gone), and leaves alone a folder whose owner is alive."""
    import time

    tmp = polluted / "tmp"
    tmp.mkdir()
    (polluted / "slow.py").write_text("import time; time.sleep(120)\n")
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "envguard", "bisect", "good", "--python", str(polluted / "bad"),
            "--run", "python slow.py", "--no-index", "--find-links", str(wheelhouse), "--offline",
        ],
        cwd=polluted, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    with proc:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(tmp.glob("envguard-bisect-*/venv/bin")):
            time.sleep(0.1)
        proc.kill()
    left = [p.name for p in tmp.iterdir()]
    assert left, "the killed run left nothing to sweep"
    live = tmp / f"envguard-export-{os.getpid()}@{os.uname().nodename}-keepme00"
    live.mkdir()  # a running envguard's (this process is alive)
    out = bisect(polluted, wheelhouse, ALWAYS_SLOW="1", TMPDIR=str(tmp))
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(p.name for p in tmp.iterdir()) == [live.name], left


def test_a_planted_scratch_name_with_a_huge_pid_does_not_stop_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anyone can create `envguard-export-99999999999999999999@<host>-x` in a shared /tmp:
    os.kill() raised OverflowError for that pid, and every bisect and `export --format
    pylock` of every user on the host stopped with a traceback. Such a pid runs nowhere."""
    import tempfile

    from envguard.recovery import scratch

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    (tmp_path / f"envguard-export-{'9' * 20}@{scratch.HOST}-x").write_text("")
    dead = tmp_path / f"envguard-bisect-{'9' * 20}@{scratch.HOST}-y"
    dead.mkdir()
    scratch.sweep()
    assert not dead.exists()


@pytest.mark.parametrize(
    ("skipped", "first", "unsure"),
    [(set(), "c3", 0), ({"c2"}, "c3", 1), ({"c3"}, "c4", 1), ({"c1", "c2", "c4"}, "c3", 2)],
)
def test_the_commit_search_judges_a_skipped_commit_by_its_neighbours(
    skipped: set[str], first: str, unsure: int
) -> None:
    """A flaky commit (exit 125) is left out, as git bisect skip; the search still ends,
    and says how many skipped commits just before the one it names could be the first."""
    from envguard.recovery.commits import first_bad

    todo = ["c1", "c2", "c3", "c4", "c5"]  # c3 is the first bad; c5 (HEAD) is known bad
    ran: list[str] = []

    def test(commit: str) -> str:
        ran.append(commit)
        return "skip" if commit in skipped else ("bad" if commit >= "c3" else "good")

    assert first_bad(todo, test, affordable=lambda _: True) == (first, True, unsure)
    assert len(set(ran)) == len(ran) <= 4
    assert first_bad(todo, test, affordable=lambda _: False) == ("c5", False, 0)


def test_the_torch_unit_names_the_builds_as_diff_does() -> None:
    """PyPI's CUDA torch carries no build label (2.14.1); its version.py says +cu130, and
    bisect names the unit as the verdict does."""
    from envguard.recovery.bisect import units
    from envguard.snapshots.models import TorchBuild
    from factories import package, snapshot

    good = snapshot([package("torch", "2.13.0+cpu")], torch=TorchBuild(version="2.13.0+cpu"))
    bad = snapshot(
        [package("torch", "2.14.1"), package("nvidia-nccl-cu13", "2.30.7")],
        torch=TorchBuild(version="2.14.1+cu130", cuda="13.0"),
    )
    (unit,) = [u for u in units(good, bad) if u.id == "torch"]
    assert unit.label == "torch 2.13.0+cpu -> 2.14.1+cu130 with 1 more of its stack"
