"""The host under the venv: the GPUs on the bus, the NCCL config files and net plugins,
GPUDirect RDMA (peermem), InfiniBand and OFED, the kernel, the container image.

What must be the same on every node of a job (the GPUs, the plugins and the one NCCL
loads, the config files, peermem) is critical; what usually is but need not break a run
(the kernel, OFED, the RDMA devices' firmware, the container image) a warning. A snapshot
taken before the host layer was recorded compares as "not recorded", an info.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from envguard.compare.sections.base import Section
from envguard.compare.sections.interpreter import ABSENT
from envguard.compare.severity import Severity

if TYPE_CHECKING:
    from envguard.compare.engine import Collector
    from envguard.snapshots.models import HostLayer, Snapshot

C, W, I = Severity.critical, Severity.warning, Severity.info  # noqa: E741


def _kernel(snap: Snapshot) -> str | None:
    return snap.interpreter.markers.get("platform_release")


def _plugins(layer: HostLayer) -> dict[str, str | None]:
    return {p.name: p.sha256 for p in layer.net_plugins}


def _confs(layer: HostLayer) -> dict[str, tuple[str | None, dict[str, str]]]:
    return {c.path: (c.sha256, dict(c.keys)) for c in layer.nccl_conf}


def _keys_said(before: dict[str, str], after: dict[str, str]) -> str:
    said = [
        f"{k}={before.get(k, '(unset)')} -> {after.get(k, '(unset)')}"
        for k in sorted(set(before) | set(after))
        if before.get(k) != after.get(k)
    ]
    return ", ".join(said[:6]) if said else "comments or spacing only"


def _container(layer: HostLayer) -> str | None:
    c = layer.container
    if c is None:
        return None
    return c.digest or c.image or c.runtime


def compare(b: Collector, e: Snapshot, a: Snapshot) -> None:
    ek, ak = _kernel(e), _kernel(a)
    if ek and ak and ek != ak:
        b.add(
            "kernel", "kernel", expected=ek, actual=ak, severity=W, message=f"kernel {ek} -> {ak}"
        )
    el, al = e.host_layer, a.host_layer
    if el is None or al is None:
        if (el is None) != (al is None):
            b.add(
                "not_recorded",
                "host layer",
                severity=I,
                message="the host layer (GPUs on the bus, NCCL files and plugins, peermem,"
                " container) is not recorded in one side: not compared",
            )
        return
    if el.gpu_devices != al.gpu_devices:
        before, after = ", ".join(el.gpu_devices) or "none", ", ".join(al.gpu_devices) or "none"
        b.add(
            "gpu_devices",
            "pci",
            expected=before,
            actual=after,
            severity=C,
            message=f"NVIDIA GPUs on the PCI bus {len(el.gpu_devices)} -> {len(al.gpu_devices)}"
            f" ({before} -> {after})",
        )
    _compare_plugins(b, el, al)
    _compare_confs(b, el, al)
    if el.peermem is not None and al.peermem is not None and el.peermem != al.peermem:
        b.add(
            "peermem",
            "nvidia_peermem",
            expected="loaded" if el.peermem else "not loaded",
            actual="loaded" if al.peermem else "not loaded",
            severity=C,
            message="nvidia_peermem (GPUDirect RDMA) "
            + ("is no longer loaded" if el.peermem else "is loaded now"),
        )
    if el.infiniband != al.infiniband:
        b.add(
            "infiniband",
            "infiniband",
            expected=", ".join(el.infiniband) or "none",
            actual=", ".join(al.infiniband) or "none",
            severity=W,
            message="InfiniBand devices or their firmware changed",
        )
    if el.ofed != al.ofed:
        b.add(
            "ofed",
            "ofed",
            expected=el.ofed,
            actual=al.ofed,
            severity=W,
            message=f"OFED {el.ofed or ABSENT} -> {al.ofed or ABSENT}",
        )
    ec, ac = _container(el), _container(al)
    if ec != ac:
        b.add(
            "container",
            "container",
            expected=ec,
            actual=ac,
            severity=W,
            message=f"container image {ec or '(none)'} -> {ac or '(none)'}",
        )


def _compare_plugins(b: Collector, el: HostLayer, al: HostLayer) -> None:
    before, after = _plugins(el), _plugins(al)
    for name in sorted(set(before) | set(after)):
        if name not in after:
            said = "is no longer on the loader's path"
        elif name not in before:
            said = "is on the loader's path now"
        elif before[name] != after[name]:
            said = "another build (sha256 differs)"
        else:
            continue
        b.add(
            "net_plugins",
            name,
            expected=before.get(name),
            actual=after.get(name),
            severity=C,
            message=f"NCCL net plugin {name}"
            + (f": {said}" if name in before and name in after else f" {said}"),
        )
    if el.net_plugin != al.net_plugin:
        b.add(
            "net_plugin",
            "NCCL_NET_PLUGIN",
            expected=el.net_plugin,
            actual=al.net_plugin,
            severity=C,
            message=f"the net plugin NCCL loads {el.net_plugin or '(none: its own sockets/IB)'}"
            f" -> {al.net_plugin or '(none: its own sockets/IB)'}",
        )


def _compare_confs(b: Collector, el: HostLayer, al: HostLayer) -> None:
    before, after = _confs(el), _confs(al)
    for path in sorted(set(before) | set(after)):
        if before.get(path) == after.get(path):
            continue
        old = before.get(path, (None, {}))
        new = after.get(path, (None, {}))
        what = "absent now" if path not in after else "new" if path not in before else None
        b.add(
            "nccl_conf",
            path,
            expected=old[0],
            actual=new[0],
            severity=C,
            message=f"{path}: {what or 'changed'} ({_keys_said(old[1], new[1])})",
        )


def host_label(snap: Snapshot) -> str:
    """One line for `envguard show`: "kernel 6.8.0, 8 GPUs on the bus, net plugin
    libnccl-net.so, /etc/nccl.conf, peermem, docker"."""
    layer = snap.host_layer
    parts = [f"kernel {_kernel(snap) or ABSENT}"]
    if layer is None:
        return parts[0]
    parts.append(f"{len(layer.gpu_devices)} GPUs on the bus")
    parts.append(
        f"net plugin {layer.net_plugin.rsplit('/', 1)[-1]}" if layer.net_plugin else "no net plugin"
    )
    parts += [c.path for c in layer.nccl_conf]
    if layer.peermem:
        parts.append("peermem")
    if layer.ofed:
        parts.append(layer.ofed)
    if layer.container is not None:
        parts.append(_container(layer) or layer.container.runtime)
    return ", ".join(parts)


def identity(snap: Snapshot) -> Iterator[tuple[str, str]]:
    yield "kernel", _kernel(snap) or ABSENT
    layer = snap.host_layer
    if layer is None:
        return
    yield "gpu_devices", ", ".join(layer.gpu_devices) or "none"
    for name, digest in sorted(_plugins(layer).items()):
        yield f"net plugin {name}", (digest or "unreadable")[:12]
    yield "net_plugin", layer.net_plugin or "none"
    for path, (digest, _keys) in sorted(_confs(layer).items()):
        yield path, (digest or "unreadable")[:12]
    yield "peermem", ABSENT if layer.peermem is None else str(layer.peermem).lower()
    yield "infiniband", ", ".join(layer.infiniband) or "none"
    yield "ofed", layer.ofed or ABSENT
    yield "container", _container(layer) or "none"


SECTION = Section(
    name="host_layer", title="The host under the venv", compare=compare, identity=identity
)
