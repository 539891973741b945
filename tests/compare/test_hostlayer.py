"""The host layer in diff and fleet: fake nodes (/proc, /sys, /etc trees) recorded as
snapshots, compared under the default policy and a project's [tool.envguard]."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envguard.compare.engine import diff
from envguard.compare.fleet import compare
from envguard.compare.models import Severity
from envguard.compare.policy import policy_from_table
from envguard.snapshots import store
from envguard.snapshots.models import Accelerator, HostLayer, Snapshot
from factories import envguard_cli, interpreter, load_target, make_host_tree, snapshot

script = load_target()
PLUGIN = {"libnccl-net.so": b"aws-ofi-nccl 1.9"}


def node(root: Path, *, kernel: str = "5.15.0-105-generic", **tree: Any) -> Snapshot:
    """A snapshot of the fake node ``root`` (made with ``tree``) as the probe records it."""
    make_host_tree(root, **tree)
    acc = script.accelerator(None, None, str(root / "proc"))
    markers = {**interpreter().markers, "platform_release": kernel}
    return snapshot(
        accelerator=Accelerator.model_validate(acc),
        host_layer=HostLayer.model_validate(script.host_layer({}, str(root))),
        interpreter=interpreter(markers=markers),
    )


def found(e: Snapshot, a: Snapshot, **table: Any) -> dict[tuple[str, str, str], Severity]:
    policy = policy_from_table(table, where="pyproject.toml") if table else None
    return {(c.section, c.kind, c.name): c.severity for c in diff(e, a, policy).changes}


@pytest.fixture(autouse=True)
def _no_plugin_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NCCL_NET_PLUGIN", "NCCL_CONF_FILE", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)


def test_a_node_missing_the_net_plugin_is_critical(tmp_path: Path) -> None:
    good = node(tmp_path / "a", plugins=PLUGIN)
    assert found(good, good) == {}
    assert found(good, node(tmp_path / "b")) == {
        ("host_layer", "net_plugins", "libnccl-net.so"): Severity.critical,
        ("host_layer", "net_plugin", "NCCL_NET_PLUGIN"): Severity.critical,
    }
    rebuilt = node(tmp_path / "c", plugins={"libnccl-net.so": b"aws-ofi-nccl 1.11"})
    (change,) = [c for c in diff(good, rebuilt).changes]
    assert change.message == "NCCL net plugin libnccl-net.so: another build (sha256 differs)"


def test_driver_gpus_nccl_conf_peermem_kernel_and_their_severities(tmp_path: Path) -> None:
    good = node(tmp_path / "a", nccl_conf="NCCL_IB_HCA=mlx5_0\n")
    assert found(
        good, node(tmp_path / "b", driver="560.35.03", nccl_conf="NCCL_IB_HCA=mlx5_0\n")
    ) == {("accelerator", "driver", "driver"): Severity.critical}
    one = node(
        tmp_path / "c", gpus=[("NVIDIA H100 80GB HBM3", "0x2330")], nccl_conf="NCCL_IB_HCA=mlx5_0\n"
    )
    assert found(good, one) == {
        ("accelerator", "count", "gpus"): Severity.critical,
        ("host_layer", "gpu_devices", "pci"): Severity.critical,
    }
    conf = node(tmp_path / "d", nccl_conf="NCCL_IB_HCA=mlx5_1\nNCCL_DEBUG=INFO\n")
    (change,) = diff(good, conf).changes
    assert (change.kind, change.severity) == ("nccl_conf", Severity.critical)
    assert change.message == (
        "/etc/nccl.conf: changed (NCCL_DEBUG=(unset) -> INFO, NCCL_IB_HCA=mlx5_0 -> mlx5_1)"
    )
    no_peermem = node(tmp_path / "e", peermem=False, nccl_conf="NCCL_IB_HCA=mlx5_0\n")
    assert found(good, no_peermem) == {
        ("host_layer", "peermem", "nvidia_peermem"): Severity.critical
    }
    kernel = node(tmp_path / "f", kernel="6.8.0-45-generic", nccl_conf="NCCL_IB_HCA=mlx5_0\n")
    assert found(good, kernel) == {("host_layer", "kernel", "kernel"): Severity.warning}
    # glibc stays where it was recorded: the interpreter's libc, a warning.
    glibc = good.model_copy(update={"interpreter": interpreter(libc="glibc 2.39")})
    assert found(good, glibc)[("interpreter", "libc", "libc")] == Severity.warning
    # A project makes peermem a warning and the kernel nothing to fail on.
    assert found(good, no_peermem, severity={"host_layer.peermem": "warning"}) == {
        ("host_layer", "peermem", "nvidia_peermem"): Severity.warning
    }
    assert found(good, kernel, severity={"host_layer.kernel": "info"}) == {
        ("host_layer", "kernel", "kernel"): Severity.info
    }


def test_container_image_is_a_warning_and_its_id_is_never_compared(tmp_path: Path) -> None:
    def podman(root: Path, digest: str, ident: str) -> Snapshot:
        (root / "run").mkdir(parents=True)
        (root / "run" / ".containerenv").write_text(
            f'engine="podman-4.9.3"\nid="{ident}"\nimage="r/train:1"\nimageid="{digest}"\n'
        )
        return node(root)

    good = podman(tmp_path / "a", "ab" * 32, "01" * 32)
    assert found(good, podman(tmp_path / "b", "ab" * 32, "02" * 32)) == {}  # another container
    assert found(good, podman(tmp_path / "c", "cd" * 32, "01" * 32)) == {
        ("host_layer", "container", "container"): Severity.warning
    }


def test_a_snapshot_before_the_host_layer_loads_and_diffs_without_false_alarm(
    tmp_path: Path,
) -> None:
    """An older file (schema minor 6, no host_layer) loads; against a node that records
    one it is an info "not recorded", never drift."""
    live = node(tmp_path / "a", plugins=PLUGIN)
    doc = json.loads(live.model_dump_json())
    del doc["host_layer"]
    doc["schema_minor"] = 6
    (tmp_path / "old.json").write_text(json.dumps(doc))
    old = store.load(tmp_path / "old.json")
    assert old.host_layer is None
    drift = diff(old, live)
    assert [(c.kind, c.severity) for c in drift.changes] == [("not_recorded", Severity.info)]
    assert not drift.reaches(Severity.warning)
    assert diff(old, old).changes == ()


def test_fleet_names_the_node_without_the_plugin(tmp_path: Path) -> None:
    fleet = {f"gpu{i}": node(tmp_path / f"n{i}", plugins=PLUGIN) for i in range(1, 4)}
    fleet["gpu4"] = node(tmp_path / "n4")
    report = compare(fleet)
    assert report.odd_hosts == ("gpu4",)
    items = {d.item: [(v.value, v.hosts) for v in d.values] for d in report.differences}
    digest = script.sha256_file(str(tmp_path / "n1" / "usr" / "lib" / "libnccl-net.so"))
    assert items == {
        "net plugin libnccl-net.so": [
            (digest[:12], ("gpu1", "gpu2", "gpu3")),
            ("(absent)", ("gpu4",)),
        ],
        "net_plugin": [("/usr/lib/libnccl-net.so", ("gpu1", "gpu2", "gpu3")), ("none", ("gpu4",))],
    }


def test_this_untouched_machine_matches_its_own_snapshot(tmp_path: Path) -> None:
    """The real probe on this machine (CPU only, most of the host layer absent): the host
    layer is recorded, and a diff of the live machine against it says nothing."""
    taken = envguard_cli("snapshot", "-o", tmp_path / "s.json", cwd=tmp_path)
    assert taken.returncode == 0, taken.stderr
    layer = json.loads((tmp_path / "s.json").read_text())["host_layer"]
    assert set(layer) >= {"gpu_devices", "net_plugins", "nccl_conf", "peermem", "container"}
    checked = envguard_cli("diff", tmp_path / "s.json", "--format", "json", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    sections = {c["section"] for c in json.loads(checked.stdout)["changes"]}
    assert not sections & {"host_layer", "accelerator", "interpreter"}


@pytest.mark.parametrize(
    "layer",
    [
        {"net_plugins": "libnccl-net.so"},
        {"nccl_conf": [{"path": "/etc/nccl.conf", "sha256": "../../etc/passwd"}]},
        {"gpu_devices": ["10de:2330"] * 65},
        {"container": {"runtime": "docker\x1b[2J"}},
    ],
)
def test_a_forged_host_layer_is_one_line_and_exit_2(tmp_path: Path, layer: dict[str, Any]) -> None:
    doc = json.loads(snapshot().model_dump_json())
    doc["host_layer"] = layer
    (tmp_path / "forged.json").write_text(json.dumps(doc))
    done = envguard_cli("show", tmp_path / "forged.json", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ") and "host_layer" in done.stderr.splitlines()[0]


def test_show_says_the_host_layer_in_one_line(tmp_path: Path) -> None:
    from envguard.compare.sections.host_layer import host_label

    snap = node(tmp_path / "a", plugins=PLUGIN, nccl_conf="NCCL_IB_HCA=mlx5_0\n")
    assert host_label(snap) == (
        "kernel 5.15.0-105-generic, 2 GPUs on the bus, net plugin libnccl-net.so,"
        " /etc/nccl.conf, peermem"
    )
    assert host_label(snapshot()) == "kernel (absent)"


def test_a_plugin_gone_from_ld_library_path_fails_check_through_the_real_probe(
    tmp_path: Path,
) -> None:
    """The whole path on this machine: the probe finds a libnccl-net.so on LD_LIBRARY_PATH,
    the snapshot records it, and `check` fails (exit 1) once it is gone."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libnccl-net.so").write_bytes(b"\x7fELF plugin")
    env = {"LD_LIBRARY_PATH": str(lib)}
    taken = envguard_cli("snapshot", "-o", tmp_path / "s.json", cwd=tmp_path, env=env)
    assert taken.returncode == 0, taken.stderr
    layer = json.loads((tmp_path / "s.json").read_text())["host_layer"]
    assert layer["net_plugin"] == str(lib / "libnccl-net.so")
    assert envguard_cli("check", tmp_path / "s.json", cwd=tmp_path, env=env).returncode == 0
    (lib / "libnccl-net.so").unlink()
    done = envguard_cli("check", tmp_path / "s.json", "--format", "json", cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stderr
    found = {(c["kind"], c["severity"]) for c in json.loads(done.stdout)["changes"]}
    assert found == {("net_plugins", "critical"), ("net_plugin", "critical")}
