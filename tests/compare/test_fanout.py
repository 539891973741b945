"""`envguard probe-payload` run by an engine's own fan-out, and `envguard fleet` reading
what the engine left: every node a row, a failed one too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envguard import api
from envguard.cli import app
from factories import engine_answers, own_slurm, own_slurm_missing, slurm_job

runner = CliRunner()


@pytest.fixture(scope="module")
def payload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("payload") / "p.py"
    path.write_text(api.probe_payload())
    return path


@pytest.fixture(scope="module")
def line(payload: Path) -> str:
    """What one node prints: this interpreter, measured by the script alone."""
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(payload)], capture_output=True, text=True, check=True
    )
    assert proc.stdout.count("\n") == 1 and proc.stdout.endswith("\n")  # one line, whole
    return proc.stdout


def test_the_script_prints_one_line_naming_the_node(line: str, payload: Path) -> None:
    envelope = json.loads(line)
    assert envelope["exit"] == 0 and envelope["node"] == envelope["report"]["host"]
    assert envelope["report"]["packages"]
    # As clush and pdsh send it: the script on stdin (`python3 - < p.py`).
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-"],
        input=payload.read_text(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(proc.stdout)["report"]["packages"] == envelope["report"]["packages"]


def test_a_clush_stream_with_failed_nodes_is_one_row_each(line: str, in_tmp: Path) -> None:
    """clush prefixes each line with the node; a node that failed says so in clush's own
    line or in what it printed; a node listed in --hosts that sent nothing is a row too."""
    other = json.loads(line)
    other["report"]["env"] = {**other["report"]["env"], "NCCL_ALGO": "Tree"}
    stream = [f"gpu0{i}: {line}" for i in (1, 2, 3)]
    stream += [
        f"gpu04: {json.dumps(other)}\n",
        "gpu05: bash: python3: command not found\n",
        "clush: gpu05: exited with exit code 127\n",
        'gpu06: {"node": "gpu06", "exit": 1, "report": {"probe_version": 4,'
        ' "error": {"kind": "failed", "message": "OSError: disk gone"}}}\n',
        f"gpu07: {line[:400]}\n",  # cut off
    ]
    (in_tmp / "clush.out").write_text("".join(stream))
    hosts = "gpu01,gpu02,gpu03,gpu04,gpu05,gpu06,gpu07,gpu08"
    result = runner.invoke(app, ["fleet", "clush.out", "--hosts", hosts, "--format", "json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["odd_hosts"] == ["gpu04"]
    assert report["failed"] == [
        {"host": "gpu05", "reason": "no report (exit 127): bash: python3: command not found"},
        {"host": "gpu06", "reason": "the probe failed: OSError: disk gone"},
        {"host": "gpu07", "reason": "not a report (JSON cut off after 400 bytes)"},
        {"host": "gpu08", "reason": "no report (nothing received)"},
    ]


def test_srun_labels_are_task_numbers_so_the_node_names_itself(line: str, in_tmp: Path) -> None:
    """srun --label prefixes the task number; srun names the node in its failure lines."""
    first, second = json.loads(line), json.loads(line)
    first["node"], second["node"] = "n1", "n2"
    text = f"0: {json.dumps(first)}\n1: {json.dumps(second)}\n"
    text += "srun: error: n3: task 2: Exited with exit code 3\n"
    result = runner.invoke(app, ["fleet", "-", "--format", "json"], input=text)
    report = json.loads(result.stdout)
    assert report["hosts"] == ["n1", "n2", "n3"]
    assert report["failed"] == [{"host": "n3", "reason": "no report (exit 3)"}]


def test_a_folder_of_reports_and_snapshots_with_an_engine_log(line: str, in_tmp: Path) -> None:
    """srun --output=DIR/%N.json leaves an empty file for a node that failed; its stderr
    (srun's own lines) says why."""
    folder = in_tmp / "out"
    folder.mkdir()
    (folder / "n1.json").write_text(line)
    bare = json.loads(line)["report"]  # a bare report, as `python3 p.py | jq .report` leaves
    (folder / "n2.json").write_text(json.dumps(bare))
    (folder / "n3.json").write_text("")
    (folder / "n4.json").write_text("Traceback (most recent call last):\n")
    (in_tmp / "srun.err").write_text("srun: error: n3: task 2: Exited with exit code 3\n")
    result = runner.invoke(app, ["fleet", "out", "srun.err", "--format", "json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 1
    assert [g["hosts"] for g in report["groups"]] == [["n1", "n2"]]
    assert report["failed"] == [
        {"host": "n3", "reason": "no report (exit 3)"},
        {"host": "n4", "reason": "not a report (not JSON)"},
    ]


def test_a_large_fleet_fits_one_screen(line: str, in_tmp: Path) -> None:
    """One node missing every package: a few rows and a count, not one row per package."""
    envelope = json.loads(line)
    empty = {**envelope, "report": {**envelope["report"], "packages": []}}
    lines = [f"node{i:03d}: {line}" for i in range(30)] + [f"node999: {json.dumps(empty)}\n"]
    (in_tmp / "s.txt").write_text("".join(lines))
    result = runner.invoke(app, ["fleet", "s.txt"])
    assert result.exit_code == 1
    packages = len(envelope["report"]["packages"])
    assert f"(+{packages - 3} more items" in result.stdout
    assert len(result.stdout.splitlines()) < 25


def _recipe(name: str, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    return subprocess.run(
        ["bash", str(RECIPES / name), *args],
        cwd=cwd,
        env={**os.environ, "PATH": path, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


RECIPES = Path(__file__).resolve().parents[2] / "examples" / "fleet"


@pytest.mark.slow
@pytest.mark.skipif(not engine_answers("sinfo", "-h"), reason="no Slurm running here")
def test_slurm_recipe_in_one_allocation(in_tmp: Path) -> None:
    """Against a real Slurm: one allocation, the probe on srun's stdin, one step; then a
    node whose interpreter is missing is a row, and the recipe still reaches fleet."""
    with slurm_job() as job:
        proc = _recipe("slurm-fanout.sh", job, sys.executable, cwd=in_tmp)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "all 1 hosts agree" in proc.stdout
        proc = _recipe("slurm-fanout.sh", job, "/nonexistent/python3", cwd=in_tmp)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "no report (exit 2)" in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(not engine_answers("clush", "--version"), reason="no ClusterShell here")
def test_clush_recipe_with_a_node_that_fails(in_tmp: Path, tmp_path: Path) -> None:
    """clush's exec worker stands in for ssh (%h: the node's name), so each "node" runs
    its own interpreter here; n2 has none, n4 is listed and sends nothing."""
    for node in ("n1", "n3"):
        (tmp_path / f"py-{node}").symlink_to(sys.executable)
    python = str(tmp_path / "py-%h")
    proc = _recipe("clush.sh", "n[1,3]", python, cwd=in_tmp, CLUSH_OPTS="-R exec")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all 2 hosts agree" in proc.stdout
    proc = _recipe("clush.sh", "n[1-3]", python, cwd=in_tmp, CLUSH_OPTS="-R exec")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "n2   │ no report (exit 127)" in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(not engine_answers("pdsh", "-V"), reason="no pdsh here")
def test_pdsh_recipe_and_nodes_that_fail(in_tmp: Path, tmp_path: Path) -> None:
    """pdsh's exec module stands in for ssh (every "node" runs here); pdcp, which it lacks,
    is a local copy. Nodes whose interpreter is missing are rows; fleet still runs."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pdcp").write_text('#!/bin/sh\nfor a; do src=$dst; dst=$a; done; cp "$src" "$dst"\n')
    (bin_dir / "pdcp").chmod(0o755)
    env = {
        "PDSH_RCMD_TYPE": "exec",
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    proc = _recipe("pdsh.sh", "n[1-3]", sys.executable, cwd=in_tmp, **env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all 3 hosts agree" in proc.stdout
    proc = _recipe("pdsh.sh", "n[1-3]", "/nonexistent/python3", cwd=in_tmp, **env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.count("no report (exit 255)") == 3


@pytest.mark.slow
@pytest.mark.skipif(
    not engine_answers("ansible-playbook", "--version"), reason="no ansible-core here"
)
def test_ansible_recipe_keeps_failed_and_unreachable_hosts(in_tmp: Path, tmp_path: Path) -> None:
    """Local hosts stand in for real ones; n3's interpreter fails saying a Windows path
    (kept as said, never a tab); n4 is unreachable. Each is a row; the others compare."""
    (in_tmp / "p.py").write_text(api.probe_payload())
    fail = tmp_path / "fail.sh"
    fail.write_text("#!/bin/sh\nprintf '%s\\n' 'C:\\tmp\\new: not found' >&2\nexit 3\n")
    fail.chmod(0o755)
    local = f"ansible_connection=local ansible_python_interpreter={sys.executable}"
    here = f"{local} envguard_python={sys.executable}"
    (in_tmp / "inventory").write_text(
        f"n1 {here}\nn2 {here}\nn3 {local} envguard_python={fail}\n"
        "n4 ansible_host=127.0.0.1 ansible_port=1 ansible_connection=ssh\n"
    )
    extra = f"envguard_out={in_tmp / 'run'} envguard_payload={in_tmp / 'p.py'}"
    proc = subprocess.run(
        ["ansible-playbook", "-i", "inventory", str(RECIPES / "ansible-fanout.yml"), "-e", extra],
        cwd=in_tmp,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    result = runner.invoke(app, ["fleet", "run", "--format", "json"])
    report = json.loads(result.stdout)
    assert [g["hosts"] for g in report["groups"]] == [["n1", "n2"]]
    reasons = {f["host"]: f["reason"] for f in report["failed"]}
    assert reasons["n3"] == "no report (exit 3): non-zero return code C:\\tmp\\new: not found"
    assert reasons["n4"].startswith("no report (exit -1): ") and "port 1" in reasons["n4"]


@pytest.mark.parametrize(
    "text",
    [
        b"\x00\xff\xfe garbage\n",
        b'gpu01: {"node": "gpu01", "exit": 0, "bytes": 999999999999, "report": {\n',
        b"gpu01: " + b"[" * 100000 + b"\n",
        b'gpu01: {"node": "gpu01", "exit": 0, "report": [1, 2]}\n',
        b'gpu01: {"node": "gpu01", "exit": true, "report": null}\n',
        b'gpu01: {"schema_version": 1, "name": 3}\n',
        b'gpu01: {"probe_version": 4, "packages": "x"}\n',
        b'gpu01: {"node": "../../etc", "report": {"error": {"kind": "failed", "message": 1}}}\n',
        b"x" * 300 + b": {}\n",
        b"gpu01: \xc3\x28 not utf-8 {\n",
    ],
)
def test_a_hostile_stream_is_rows_or_one_error_never_a_traceback(text: bytes, in_tmp: Path) -> None:
    (in_tmp / "s.txt").write_bytes(text)
    result = runner.invoke(app, ["fleet", "s.txt", "--format", "json"])
    assert result.exit_code in (1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    if result.exit_code == 1:
        for failed in json.loads(result.stdout)["failed"]:
            assert failed["host"].isprintable() and "/" not in failed["host"]


FAKE_SCONTROL = """\
#!/usr/bin/env bash
# scontrol as the recipe asks it: the job's node list, then that list expanded.
case "$1 $2" in
  "show job") echo "JobId=$4 JobName=train ReqNodeList=(null) ExcNodeList=(null) NodeList=n[1-3]";;
  "show hostnames") [ "$3" = "n[1-3]" ] && printf 'n1\\nn2\\nn3\\n';;
  *) echo "scontrol: unexpected $*" >&2; exit 2;;
esac
"""

# srun as a step on node -w NODE: logs the node, runs the command with that node's own
# interpreter ($NODES/NODE/bin/python when there is one), and says a failure as srun does.
FAKE_SRUN = """\
#!/usr/bin/env bash
node=""
while [ $# -gt 0 ]; do
  case "$1" in
    -w) node="$2"; shift 2;;
    --jobid=*|--overlap|-N1|-n1|--kill-on-bad-exit=0|--input=all) shift;;
    -*) echo "srun: unexpected option $1" >&2; exit 2;;
    *) break;;
  esac
done
echo "$node" >> "$NODES/steps.log"
python="$1"; shift
[ -x "$NODES/$node/bin/python" ] && python="$NODES/$node/bin/python"
"$python" "$@"; rc=$?
[ $rc -ne 0 ] && echo "srun: error: $node: task 0: Exited with exit code $rc" >&2
exit $rc
"""


@pytest.mark.slow
def test_slurm_recipe_checks_every_node_and_finds_the_odd_one(
    in_tmp: Path, tmp_path: Path, wheelhouse: Path
) -> None:
    """Three nodes in the allocation, n2 with one package more: one step per node (the
    recipe used to start one task on one node and say "all 1 hosts agree")."""
    from factories import make_venv, make_wheel, uv_install

    bin_dir, nodes = tmp_path / "bin", tmp_path / "nodes"
    bin_dir.mkdir()
    for name, text in (("scontrol", FAKE_SCONTROL), ("srun", FAKE_SRUN)):
        (bin_dir / name).write_text(text, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    python = make_venv(tmp_path / "venv")
    make_venv(nodes / "n2")
    make_wheel(wheelhouse, "oddpkg", "1.0")
    uv_install(nodes / "n2", wheelhouse, "oddpkg==1.0")
    path = f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    proc = _recipe("slurm-fanout.sh", "42", str(python), cwd=in_tmp, PATH=path, NODES=str(nodes))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert sorted((nodes / "steps.log").read_text().split()) == ["n1", "n2", "n3"]
    assert "2 distinct environments across 3 hosts; odd ones out: n2" in proc.stdout
    assert "package oddpkg" in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(own_slurm_missing() is not None, reason=own_slurm_missing() or "")
def test_slurm_recipe_on_a_real_two_node_allocation_finds_the_odd_node(
    in_tmp: Path, tmp_path: Path, wheelhouse: Path
) -> None:
    """Two slurmd of a Slurm of the test's own, one allocation over both; the node's
    interpreter is the same path on both, a different venv behind it on gn2."""
    from factories import make_venv, make_wheel, uv_install

    base = make_venv(tmp_path / "base")
    make_venv(tmp_path / "odd")
    make_wheel(wheelhouse, "oddpkg", "1.0")
    uv_install(tmp_path / "odd", wheelhouse, "oddpkg==1.0")
    python = tmp_path / "py"  # what a shared path would be: each node its own venv
    python.write_text(
        f'#!/bin/sh\n[ "$SLURMD_NODENAME" = gn2 ] && exec {tmp_path}/odd/bin/python "$@"\n'
        f'exec {base} "$@"\n',
        encoding="utf-8",
    )
    python.chmod(0o755)
    with own_slurm(tmp_path / "slurm", ("gn1", "gn2")) as env:
        salloc = ["salloc", "--no-shell", "-N2", "--immediate=30", "-J", "eg-fanout"]
        got = subprocess.run(salloc, capture_output=True, text=True, env=env, timeout=60)
        job = got.stderr.split("Granted job allocation")[1].split()[0]
        try:
            conf = env["SLURM_CONF"]
            proc = _recipe("slurm-fanout.sh", job, str(python), cwd=in_tmp, SLURM_CONF=conf)
        finally:
            subprocess.run(["scancel", job], env=env, check=False, timeout=30)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2 distinct environments across 2 hosts" in proc.stdout
    assert "package oddpkg" in proc.stdout
