"""The scheduler hooks in examples/: the NHC check and the Slurm prolog drain a drifted node
with the drift as the reason; the Kubernetes init container is a valid one.

The prolog runs against a real single-node Slurm, started here on free ports with a
configuration of its own (needs root, slurmctld/slurmd and a running munged; skipped
otherwise). The NHC check runs under real NHC when ENVGUARD_NHC names an NHC checkout
(https://github.com/mej/nhc); without one, under a stand-in for NHC's ``die``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from factories import own_slurm, own_slurm_missing, uv_install

ROOT = Path(__file__).resolve().parents[2]
NHC_CHECK = ROOT / "examples" / "slurm" / "envguard.nhc"
PROLOG = ROOT / "examples" / "slurm" / "prolog-envguard.sh"
K8S = ROOT / "examples" / "k8s" / "envguard-init.yaml"
ENVGUARD = str(Path(sys.executable).parent / "envguard")
DRIFT = "envguard: torch 2.11.0+cu128 -> 2.11.0+cu130 (CUDA 12.8 -> 13.0)"


@pytest.fixture
def node_venv(
    venv_factory: Callable[..., Path], wheelhouse: Path, tmp_path: Path
) -> Iterator[tuple[Path, Path, Callable[[], None]]]:
    """(venv, its known-good snapshot, drift()): drift() moves torch to another CUDA build."""
    venv = venv_factory("node", "torch==2.11.0+cu128", "safetensors==0.4.5")
    snap = tmp_path / "good.json"
    cmd = [ENVGUARD, "snapshot", "--python", str(venv), "--out", str(snap), "-q"]
    subprocess.run(cmd, check=True)

    def drift() -> None:
        uv_install(venv, wheelhouse, "torch==2.11.0+cu130")

    yield venv, snap, drift


def _nhc_standin(snap: Path, venv: Path, fail_on: str = "") -> subprocess.CompletedProcess[str]:
    """check_envguard as NHC calls it, NHC's die() replaced by one that says its reason."""
    script = (
        'die() { echo "die $1: $2"; return "$1"; }\n'
        f'. "{NHC_CHECK}"\n'
        f'check_envguard "{snap}" "{venv}" "{fail_on}"\n'
    )
    env = dict(os.environ, ENVGUARD=ENVGUARD)
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)


@pytest.mark.slow
def test_the_nhc_check_names_the_drift(node_venv: tuple[Path, Path, Callable[[], None]]) -> None:
    venv, snap, drift = node_venv
    clean = _nhc_standin(snap, venv)
    assert (clean.returncode, clean.stdout) == (0, "")
    drift()
    drifted = _nhc_standin(snap, venv)
    assert drifted.returncode == 1
    assert drifted.stdout == f"die 1: {DRIFT}\n"
    gone = _nhc_standin(snap.with_name("missing.json"), venv)
    assert gone.stdout.startswith("die 1: envguard: cannot check: ")
    assert len(gone.stdout) < 120


@pytest.mark.slow
def test_a_package_upgrade_drains_as_the_gate_stops_it_unless_fail_on_says_critical(
    node_venv: tuple[Path, Path, Callable[[], None]], wheelhouse: Path
) -> None:
    """The one policy (docs/cluster.md): a plain upgrade is a warning, which the defaults
    fail on in every layer; at fail-on critical no layer does."""
    venv, snap, _ = node_venv
    uv_install(venv, wheelhouse, "safetensors==0.4.5", "transformers==4.47.0")
    assert _nhc_standin(snap, venv).stdout.startswith("die 1: envguard: ")
    assert _nhc_standin(snap, venv, "critical").stdout == ""


def test_the_init_container_manifest_has_what_an_init_container_needs() -> None:
    import yaml

    docs = [d for d in yaml.safe_load_all(K8S.read_text(encoding="utf-8")) if d]
    pods = [d for d in docs if d.get("kind") in ("Pod", "Job")]
    assert pods, "a Pod or a Job"
    for doc in pods:
        spec = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
        (init,) = spec["initContainers"]
        assert init["name"] and init["image"]
        command = init["command"] + init.get("args", [])
        assert Path(command[0]).name == "envguard" and command[1] == "check"
        assert "--fail-on" in command
        # The snapshot and the venv the training container runs, mounted into both.
        mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
        trainer_mounts = {
            m["name"]: m["mountPath"] for c in spec["containers"] for m in c["volumeMounts"]
        }
        assert set(mounts) <= {v["name"] for v in spec["volumes"]}
        assert set(mounts) <= set(trainer_mounts)
        assert any(arg.startswith(tuple(mounts.values())) for arg in command)
        assert init["resources"]["limits"]


FLEET_JOB = ROOT / "examples" / "fleet" / "k8s-job.yaml"
FLEET_RECIPES = ROOT / "examples" / "fleet"


def test_the_fleet_job_runs_one_pod_per_gpu_node_named_after_the_node() -> None:
    import yaml

    (job,) = [d for d in yaml.safe_load_all(FLEET_JOB.read_text(encoding="utf-8")) if d]
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"]
    pod = job["spec"]["template"]
    labels = pod["metadata"]["labels"]
    spec = pod["spec"]
    # One pod per node: a required anti-affinity and a spread that will not go past skew 1,
    # both over the node's hostname and both selecting this Job's own pods.
    (anti,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (spread,) = spec["topologySpreadConstraints"]
    for rule in (anti, spread):
        assert rule["topologyKey"] == "kubernetes.io/hostname"
        assert rule["labelSelector"]["matchLabels"].items() <= labels.items()
    assert (spread["maxSkew"], spread["whenUnsatisfiable"]) == (1, "DoNotSchedule")
    (capture,) = spec["containers"]
    # The node's name through the downward API, and it names the snapshot and its file.
    env = {e["name"]: e for e in capture["env"]}
    names = [
        n
        for n, e in env.items()
        if e.get("valueFrom", {}).get("fieldRef") == {"fieldPath": "spec.nodeName"}
    ]
    assert names == ["NODE_NAME"]
    script = " ".join(capture["args"])
    assert '--name "$NODE_NAME"' in script and '--out "/snapshots/$NODE_NAME.json"' in script
    assert "{host}" not in script
    assert capture["resources"]["limits"]["nvidia.com/gpu"] >= 1
    mounts = {m["name"]: m["mountPath"] for m in capture["volumeMounts"]}
    assert mounts["snapshots"] == "/snapshots"
    assert "snapshots" in {v["name"] for v in spec["volumes"]}


@pytest.mark.parametrize(
    ("recipe", "engines"), [("clush.sh", ("clush",)), ("pdsh.sh", ("pdsh", "pdcp"))]
)
def test_the_fan_out_recipes_bound_every_node(recipe: str, engines: tuple[str, ...]) -> None:
    """Every clush/pdsh/pdcp line of the recipe carries a command timeout (-u) and a
    connect timeout (-t): one hung node must not hold the whole fan-out."""
    import shlex

    text = (FLEET_RECIPES / recipe).read_text(encoding="utf-8").replace("\\\n", " ")
    calls = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        words = shlex.split(line.replace('"${bounds[@]}"', "-t 30 -u 120"), posix=True)
        calls += [words[i:] for i, w in enumerate(words) if w in engines and "-w" in words[i:]]
    assert {c[0] for c in calls} == set(engines)
    for call in calls:
        assert "-u" in call and "-t" in call, call


def test_the_prolog_lets_a_repair_in_the_maintenance_reservation_through(tmp_path: Path) -> None:
    """A drifted node (envguard check exits 1): a job in the maintenance reservation starts,
    any other job drains the node; scontrol and envguard are stand-ins that log."""
    log = tmp_path / "calls.log"
    for name, body in (
        (
            "scontrol",
            f'echo "scontrol $*" >> {log}\ncase "$1 $2" in "show job") echo "JobId=$4 Reservation=${{FAKE_RESV:-(null)}}";; esac\n',
        ),
        (
            "envguard",
            f'echo "envguard $*" >> {log}\necho "torch 2.11.0+cu128 -> 2.11.0+cu130"; exit 1\n',
        ),
    ):
        (tmp_path / name).write_text(f"#!/bin/bash\n{body}", encoding="utf-8")
        (tmp_path / name).chmod(0o755)
    conf = tmp_path / "envguard.conf"
    conf.write_text(f"ENVGUARD={tmp_path / 'envguard'}\nENVGUARD_SNAPSHOT=/x/good.json\n")
    env = {
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        "ENVGUARD_PROLOG_CONF": str(conf),
        "SLURM_JOB_ID": "7",
        "SLURMD_NODENAME": "gpu017",
    }

    def prolog(**more: str) -> subprocess.CompletedProcess[str]:
        log.write_text("")
        argv = ["bash", str(PROLOG)]
        return subprocess.run(argv, capture_output=True, text=True, env={**env, **more}, timeout=60)

    for how in ({"SLURM_JOB_RESERVATION": "envguard-maint"}, {"FAKE_RESV": "envguard-maint"}):
        assert prolog(**how).returncode == 0
        assert "envguard check" not in log.read_text() and "State=DRAIN" not in log.read_text()
    refused = prolog(FAKE_RESV="other")
    assert refused.returncode == 1
    assert "scontrol update NodeName=gpu017 State=DRAIN" in log.read_text()


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A single-node Slurm of the test's own (node egnode, prolog at its folder's
    prolog.sh); its environment (SLURM_CONF) for clients."""
    with own_slurm(tmp_path / "slurm", prolog=True) as env:
        yield env


def _sinfo(env: dict[str, str], fmt: str) -> str:
    argv = ["sinfo", "-h", "-n", "egnode", "-o", fmt]
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False).stdout


@pytest.mark.slow
@pytest.mark.skipif(own_slurm_missing() is not None, reason=own_slurm_missing() or "")
def test_the_prolog_drains_a_drifted_node_of_a_real_slurm(
    slurm: dict[str, str], node_venv: tuple[Path, Path, Callable[[], None]], tmp_path: Path
) -> None:
    venv, snap, drift = node_venv
    d = Path(slurm["SLURM_CONF"]).parent
    settings = d / "envguard.conf"
    settings.write_text(
        f"ENVGUARD={ENVGUARD}\nENVGUARD_SNAPSHOT={snap}\nENVGUARD_PYTHON={venv}\n",
        encoding="utf-8",
    )
    prolog = d / "prolog.sh"
    prolog.write_text(f"#!/bin/bash\nENVGUARD_PROLOG_CONF={settings} exec {PROLOG}\n")
    prolog.chmod(0o755)
    srun = ["srun", "-N1", "-t", "1", "--immediate=20", "echo", "ran"]
    ok = subprocess.run(srun, capture_output=True, text=True, env=slurm, timeout=60)
    assert (ok.returncode, ok.stdout) == (0, "ran\n"), ok.stderr
    drift()
    refused = subprocess.run(srun, capture_output=True, text=True, env=slurm, timeout=60)
    assert refused.returncode != 0
    assert "ran" not in refused.stdout
    assert "prolog failed" in refused.stderr.lower()
    assert _sinfo(slurm, "%t").strip() in ("drain", "drng")
    assert _sinfo(slurm, "%E").strip() == DRIFT


@pytest.mark.slow
@pytest.mark.skipif(own_slurm_missing() is not None, reason=own_slurm_missing() or "")
@pytest.mark.skipif(not os.environ.get("ENVGUARD_NHC"), reason="ENVGUARD_NHC: an NHC checkout")
def test_real_nhc_drains_a_drifted_node_and_brings_it_back(
    slurm: dict[str, str],
    node_venv: tuple[Path, Path, Callable[[], None]],
    wheelhouse: Path,
    tmp_path: Path,
) -> None:
    venv, snap, drift = node_venv
    nhc = Path(os.environ["ENVGUARD_NHC"])
    scripts = tmp_path / "nhc-scripts"
    scripts.mkdir()
    shutil.copy(nhc / "scripts" / "common.nhc", scripts)
    shutil.copy(NHC_CHECK, scripts)
    conf = tmp_path / "nhc.conf"
    conf.write_text(f"* || check_envguard {snap} {venv}\n", encoding="utf-8")
    argv = ["bash", str(nhc / "nhc"), "-D", str(tmp_path), "-c", str(conf), "-l", "-"]
    # The helpers executable, as NHC's install leaves them (a checkout may not); they call
    # scontrol, which reaches this test's Slurm through SLURM_CONF.
    helpers = tmp_path / "nhc-helpers"
    helpers.mkdir()
    for name in ("node-mark-offline", "node-mark-online"):
        shutil.copy(nhc / "helpers" / name, helpers)
        (helpers / name).chmod(0o755)
    argv += ["-t", "60", "NHC_RM=slurm", f"INCDIR={scripts}", f"HELPERDIR={helpers}"]
    argv += ["HOSTNAME=egnode", f"ENVGUARD={ENVGUARD}", f"RESULTFILE={tmp_path / 'status'}"]
    drift()
    failed = subprocess.run(argv, capture_output=True, text=True, env=slurm, check=False)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert _sinfo(slurm, "%E").strip() == f"NHC: {DRIFT}", failed.stdout + failed.stderr
    uv_install(venv, wheelhouse, "torch==2.11.0+cu128")  # put right: NHC resumes the node
    passed = subprocess.run(argv, capture_output=True, text=True, env=slurm, check=False)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert _sinfo(slurm, "%t").strip().rstrip("*") == "idle"
    assert _sinfo(slurm, "%E").strip() == "none"
