"""The host layer read from fake /proc, /sys and /etc trees (probe/target/hostlayer.py)."""

from __future__ import annotations

import fnmatch
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from factories import load_target, make_host_tree

script = load_target()
H100 = ("NVIDIA H100 80GB HBM3", "0x2330")


def test_gpus_come_from_sysfs_and_the_kernel_module_without_nvidia_smi(tmp_path: Path) -> None:
    """Two H100s on the bus; an Intel bridge and an NVSwitch (NVIDIA, not a display
    controller) are not GPUs. The kernel module's files name the models."""
    root = make_host_tree(tmp_path, gpus=[H100] * 2)
    assert script.host_layer({}, str(root))["gpu_devices"] == ["10de:2330", "10de:2330"]
    acc = script.accelerator(None, None, str(root / "proc"))
    assert acc["driver"] == "550.54.15" and acc["count"] == 2
    assert acc["gpus"] == ["NVIDIA H100 80GB HBM3"] * 2 and acc["present"]


def test_net_plugins_the_loader_would_find_and_the_one_nccl_loads(tmp_path: Path) -> None:
    root = make_host_tree(
        tmp_path,
        plugins={"libnccl-net.so": b"aws-ofi", "libnccl-net-ib2.so": b"ib2", "libother.so": b""},
    )
    layer = script.host_layer({}, str(root))
    assert [p["name"] for p in layer["net_plugins"]] == ["libnccl-net-ib2.so", "libnccl-net.so"]
    plugin = next(p for p in layer["net_plugins"] if p["name"] == "libnccl-net.so")
    assert plugin["sha256"] == hashlib.sha256(b"aws-ofi").hexdigest()
    assert plugin["path"] == "/usr/lib/libnccl-net.so"  # as the node names it, not the root
    assert layer["net_plugin"] == "/usr/lib/libnccl-net.so"
    # NCCL_NET_PLUGIN=ib2 loads libnccl-net-ib2.so; "none" turns plugins off.
    assert script.host_layer({"NCCL_NET_PLUGIN": "ib2"}, str(root))["net_plugin"].endswith(
        "libnccl-net-ib2.so"
    )
    assert script.host_layer({"NCCL_NET_PLUGIN": "none"}, str(root))["net_plugin"] is None
    # LD_LIBRARY_PATH comes first, and an ld.so.conf include is followed under the root.
    (root / "opt" / "ofi").mkdir(parents=True)
    (root / "opt" / "ofi" / "libnccl-net.so").write_bytes(b"newer")
    (root / "etc" / "ld.so.conf.d").mkdir()
    (root / "etc" / "ld.so.conf").write_text("include ld.so.conf.d/*.conf\n")  # relative
    (root / "etc" / "ld.so.conf.d" / "ofi.conf").write_text("/opt/ofi\n")
    assert script.host_layer({}, str(root))["net_plugin"] == "/opt/ofi/libnccl-net.so"
    empty = make_host_tree(tmp_path / "bare")
    assert script.host_layer({}, str(empty))["net_plugins"] == []
    assert script.host_layer({}, str(empty))["net_plugin"] is None


def test_nccl_conf_files_hash_and_keys(tmp_path: Path) -> None:
    root = make_host_tree(
        tmp_path,
        nccl_conf="# site\nNCCL_IB_HCA=mlx5_0\nNCCL_SOCKET_IFNAME = eth0\nNCCL_X_TOKEN=s3cret\n",
    )
    home = root / "home" / "u"
    home.mkdir(parents=True)
    (home / ".nccl.conf").write_text("NCCL_DEBUG=WARN\n")
    confs = script.host_layer({"HOME": "/home/u"}, str(root))["nccl_conf"]
    assert [c["path"] for c in confs] == ["~/.nccl.conf", "/etc/nccl.conf"]
    assert confs[1]["keys"]["NCCL_IB_HCA"] == "mlx5_0"
    assert confs[1]["keys"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "s3cret" not in str(confs) and confs[1]["keys"]["NCCL_X_TOKEN"].startswith("<")
    assert confs[0]["keys"] == {"NCCL_DEBUG": "WARN"} and len(confs[0]["sha256"]) == 64
    # NCCL_CONF_FILE replaces ~/.nccl.conf; a FIFO there is reported, never read (no hang).
    os.mkfifo(root / "fifo")
    named = script.host_layer({"NCCL_CONF_FILE": "/fifo", "HOME": "/home/u"}, str(root))
    assert named["nccl_conf"][0] == {
        "path": "/fifo", "sha256": None, "keys": {}, "error": "not a regular file"
    }  # fmt: skip


def test_peermem_infiniband_ofed_and_container(tmp_path: Path) -> None:
    root = make_host_tree(tmp_path, infiniband={"mlx5_0": "28.39.1002"})
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "ofed_info").write_text(
        '#!/bin/bash\nif [ "X$1" == "X-s" ]; then echo MLNX_OFED_LINUX-23.10-1.1.9.0:; exit; fi\n'
    )
    (root / "run").mkdir()
    digest = "ab" * 32
    (root / "run" / ".containerenv").write_text(
        f'engine="podman-4.9.3"\nname="t"\nid="{"cd" * 32}"\nimage="registry/train:1"\n'
        f'imageid="{digest}"\nrootless=1\n'
    )
    layer = script.host_layer({}, str(root))
    assert layer["peermem"] is True and layer["infiniband"] == ["mlx5_0 fw 28.39.1002"]
    assert layer["ofed"] == "MLNX_OFED_LINUX-23.10-1.1.9.0"
    assert layer["container"] == {
        "runtime": "podman", "image": "registry/train:1", "digest": "sha256:" + digest,
        "id": "cd" * 32,
    }  # fmt: skip
    bare = make_host_tree(tmp_path / "bare", peermem=False)
    layer = script.host_layer({}, str(bare))
    assert layer["peermem"] is False and layer["ofed"] is None and layer["container"] is None
    # Docker says only that it is docker; the id is in /proc/1/cgroup.
    (bare / ".dockerenv").write_text("")
    (bare / "proc" / "1").mkdir(parents=True)
    (bare / "proc" / "1" / "cgroup").write_text(f"0::/system.slice/docker-{'ef' * 32}.scope\n")
    assert script.host_layer({}, str(bare))["container"] == {
        "runtime": "docker", "image": None, "digest": None, "id": "ef" * 32
    }  # fmt: skip
    # Without /sys/module, peermem is unknown, not "not loaded".
    assert script.host_layer({}, str(tmp_path / "nothing"))["peermem"] is None


def test_fifos_and_huge_files_in_the_trees_are_not_read_and_never_hang(tmp_path: Path) -> None:
    """A node (or a test tree) with a FIFO where sysfs has a file, a FIFO named like a net
    plugin, a config file past the cap: each is skipped or reported, in bounded time."""
    root = make_host_tree(tmp_path, gpus=[H100])
    vendor = root / "sys" / "bus" / "pci" / "devices" / "0000:18:00.0" / "vendor"
    vendor.unlink()
    os.mkfifo(vendor)
    os.mkfifo(root / "usr" / "lib" / "libnccl-net.so")
    (root / "etc" / "nccl.conf").write_bytes(b"NCCL_X=1\n" * (1 << 18))  # 2.3 MB
    layer = script.host_layer({}, str(root))
    assert layer["gpu_devices"] == []
    assert layer["net_plugins"] == [
        {"name": "libnccl-net.so", "path": "/usr/lib/libnccl-net.so", "sha256": None}
    ]
    assert layer["nccl_conf"] == [
        {"path": "/etc/nccl.conf", "sha256": None, "keys": {}, "error": "cannot be read"}
    ]


def test_plugins_are_kept_by_stamp_and_read_again_when_they_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Library folders are listed and plugins hashed at every probe: an unchanged folder is
    not listed again, an unchanged plugin not hashed again; a plugin added, or rewritten in
    place with its mtime put back, is seen."""
    root = make_host_tree(tmp_path, plugins={"libnccl-net.so": b"aws-ofi"})
    folder = tmp_path / "cache"

    def layer() -> dict[str, Any]:
        cache = script.DistCache(str(folder), ["/site"], code="t", quiet=0.0)
        found: dict[str, Any] = script.host_layer(
            {}, str(root), script.Kept(cache, script.file_stamp)
        )
        cache.save()
        return found

    first = layer()
    assert first == script.host_layer({}, str(root))
    names, hashing = script.net_plugins.__globals__["_names"], script.sha256_file

    def listed(path: str, match: Any = None, limit: int = 4096) -> list[str]:
        if limit == script.LIB_ENTRIES and os.path.isdir(path):  # a library folder
            raise AssertionError(f"{path} listed although nothing changed")
        found: list[str] = names(path, match, limit)
        return found

    monkeypatch.setitem(script.net_plugins.__globals__, "_names", listed)
    monkeypatch.setitem(script.net_plugins.__globals__, "sha256_file", _refused)
    assert layer() == first  # warm: no folder listed, no plugin hashed
    monkeypatch.setitem(script.net_plugins.__globals__, "_names", names)
    monkeypatch.setitem(script.net_plugins.__globals__, "sha256_file", hashing)
    plugin = root / "usr" / "lib" / "libnccl-net.so"
    st = plugin.stat()
    plugin.write_bytes(b"aws-ofX")
    os.utime(plugin, ns=(st.st_atime_ns, st.st_mtime_ns))
    (root / "usr" / "lib" / "libnccl-net-ib2.so").write_bytes(b"ib2")
    again = layer()
    assert again == script.host_layer({}, str(root)) != first
    assert [p["sha256"] for p in again["net_plugins"]] == [
        hashlib.sha256(b"ib2").hexdigest(),
        hashlib.sha256(b"aws-ofX").hexdigest(),
    ]


def _refused(*args: object) -> Any:
    raise AssertionError(f"{args[0]} read although nothing changed")


def test_a_bidi_or_undecodable_character_in_a_host_file_does_not_sink_the_report(
    tmp_path: Path,
) -> None:
    """A firmware version or container image holding a bidi override (or bytes that are not
    UTF-8) is made one line of text on the node: the host would refuse the whole report
    for one such character, and every snapshot and gate on that node with it."""
    from envguard.probe import report

    root = make_host_tree(tmp_path, infiniband={"mlx5_0": "28.39\u202e1002"})
    (root / "run").mkdir()
    (root / "run" / ".containerenv").write_bytes(
        b'engine="podman-4.9.3"\nimage="registry/tr\xe2\x80\x8fain:1\xff"\n'
    )
    layer = script.host_layer({}, str(root))
    assert layer["infiniband"] == ["mlx5_0 fw 28.39 1002"]
    report._check(layer, report.REPORT_SPEC[1]["host_layer"], "host_layer")


@settings(max_examples=3000, deadline=None)
@example("a", "[a]")  # a bracket: fnmatch's
@example("ab", "a*b*b")  # a middle part must end before the last one starts
@example("ab", "*ab*b*")  # and after the part before it
@example("ab", "a*a")
@example("x.conf~", "*.conf")
@given(
    st.text(alphabet="ab.", max_size=7),
    st.one_of(st.text(alphabet="ab.*", max_size=7), st.text(alphabet="ab*?[]!-", max_size=7)),
)
def test_an_include_glob_matches_as_fnmatch_does(name: str, pattern: str) -> None:
    """ld.so.conf's includes are matched without fnmatch's import where the only wildcard
    is "*" (re with it: 8 ms of every probe), as fnmatch matches them."""
    assert script.glob_match(name, pattern) == fnmatch.fnmatchcase(name, pattern)
