"""The host layer in the rank gate: the GPUs on the bus, NCCL's net plugins and config
files and peermem must match on every node; a snapshot without the host layer is not a
difference. Nodes are fake /proc, /sys and /etc trees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from distributed.test_gate import _run_ranks
from envguard import distributed
from envguard.blame import differences
from envguard.distributed import InhomogeneousError
from envguard.probe.payload import local_entry
from factories import make_host_tree, snapshot

PLUGIN = {"libnccl-net.so": b"aws-ofi-nccl 1.9"}


def _node(root: Path) -> dict[str, Any]:
    """The gate's fingerprint detail of this venv on the fake node ``root``."""
    target = local_entry("fingerprint").fingerprint
    detail: dict[str, Any] = target.fingerprint(
        {"env": ["NCCL_*"], "host_root": str(root), "fingerprint_cache": False}
    )
    detail["nccl"] = None
    return detail


def test_a_node_missing_the_net_plugin_stops_the_job_on_every_rank(tmp_path: Path) -> None:
    """NVIDIA/nccl#1634: NCCL falls back to its own transport on the node without the
    plugin, silently; the gate names the node and the plugin."""
    with_it = _node(make_host_tree(tmp_path / "a", plugins=PLUGIN))
    without = _node(make_host_tree(tmp_path / "b"))
    assert distributed._digest(with_it) != distributed._digest(without)
    assert differences(with_it, without) == [
        f"NCCL net plugins: -libnccl-net.so {_sha(b'aws-ofi-nccl 1.9')[:12]}",
        "the net plugin NCCL loads libnccl-net.so -> (absent)",
    ]
    errors = _run_ranks([with_it, with_it, without], ["gpu1", "gpu2", "gpu3"])
    assert all(isinstance(e, InhomogeneousError) and e.odd == (2,) for e in errors)
    assert {str(e) for e in errors} == {
        "environments differ across the job: node gpu3 (rank 2) differs from the majority"
        " (2 nodes, ranks 0, 1): NCCL net plugins: -libnccl-net.so "
        f"{_sha(b'aws-ofi-nccl 1.9')[:12]}, the net plugin NCCL loads libnccl-net.so -> (absent)"
    }


def test_a_different_driver_gpu_count_nccl_conf_or_peermem_is_named(tmp_path: Path) -> None:
    base = _node(make_host_tree(tmp_path / "a", nccl_conf="NCCL_IB_HCA=mlx5_0\n"))
    driver = _node(
        make_host_tree(tmp_path / "b", driver="560.35.03", nccl_conf="NCCL_IB_HCA=mlx5_0\n")
    )
    assert differences(base, driver) == ["NVIDIA driver 550.54.15 -> 560.35.03"]
    one_gpu = _node(
        make_host_tree(tmp_path / "c", gpus=[("H100", "0x2330")], nccl_conf="NCCL_IB_HCA=mlx5_0\n")
    )
    assert differences(base, one_gpu) == ["GPUs on the PCI bus: 2 -> 1"]
    conf = _node(make_host_tree(tmp_path / "d", nccl_conf="NCCL_IB_HCA=mlx5_1\n"))
    said = differences(base, conf)
    assert len(said) == 1 and said[0].startswith("NCCL config files: -/etc/nccl.conf ")
    no_peermem = _node(
        make_host_tree(tmp_path / "e", peermem=False, nccl_conf="NCCL_IB_HCA=mlx5_0\n")
    )
    assert differences(base, no_peermem) == ["nvidia_peermem loaded True -> False"]
    # The same node twice: the same hash (nothing in the host layer varies by itself).
    again = _node(tmp_path / "a")
    assert distributed._digest(again) == distributed._digest(base)


def test_a_snapshot_without_the_host_layer_is_not_a_difference() -> None:
    """A snapshot taken before the host layer was recorded compares as before: no "host"
    in its detail, so no false alarm against a live node that has one."""
    old = snapshot()
    assert old.host_layer is None and "host" not in distributed.snapshot_detail(old)
    mine = distributed.fingerprint(cache=False)
    assert mine.detail["host"] is not None
    said = differences(distributed.snapshot_detail(old), mine.detail)
    assert not [s for s in said if s.startswith(("GPUs", "NCCL ", "the net", "nvidia_peermem"))]


def test_the_gate_and_a_snapshot_see_the_same_host_layer(tmp_path: Path) -> None:
    """The fingerprint's host part is a function of the host layer as the snapshot records
    it: a node's snapshot agrees with its live fingerprint, field for field."""
    from envguard.snapshots.models import HostLayer

    root = make_host_tree(tmp_path, plugins=PLUGIN, nccl_conf="NCCL_IB_HCA=mlx5_0\n")
    target = local_entry("fingerprint")
    layer = HostLayer.model_validate(target.hostlayer.host_layer({}, str(root)))
    detail = distributed.snapshot_detail(snapshot(host_layer=layer))
    assert detail["host"] == _node(root)["host"]


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def _no_plugin_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NCCL_NET_PLUGIN", "NCCL_CONF_FILE", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)
