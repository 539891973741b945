"""The host layer on a real GPU node, checked against the node's own tools.

Run from the repository root on a machine with an NVIDIA GPU and driver (the standard
library only: no venv, no pydantic):

    python3 examples/device/host_layer_check.py [OUT_DIR]

It reads the host layer as the probe does (probe/target/hostlayer.py, system.py) and checks
it against nvidia-smi, lspci-free sysfs counts, lsmod's view of /sys/module and the loader's
own answer (ctypes.CDLL of the net plugin NCCL would load). Then it makes a second node out
of a copy of the first (a fake root with the plugin removed and the driver changed) and
checks that the gate's fingerprint tells them apart and says why. Prints one line per check,
"ok" or "FAIL", writes the layer as JSON to OUT_DIR when given; exit 1 on any FAIL, 2
without a driver, 0 else.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from envguard.probe.payload import local_entry

target = local_entry("fingerprint")
hostlayer, system = target.hostlayer, target.system
failed: list[str] = []


def check(what: str, ok: bool, detail: object = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail != "" else ""))
    if not ok:
        failed.append(what)


def tool(*argv: str) -> str:
    """A tool's stdout; "" when it is not installed or fails."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def smi(*query: str) -> list[str]:
    out = tool("nvidia-smi", f"--query-gpu={','.join(query)}", "--format=csv,noheader")
    return [line.strip() for line in out.splitlines() if line.strip()]


environ = dict(os.environ)
layer = hostlayer.host_layer(environ)
acc_proc = system.accelerator(None, None)  # the kernel module's files only
acc_smi = system.accelerator("\n".join(smi("name", "driver_version")), None)
print(json.dumps({"host_layer": layer, "accelerator_from_proc": acc_proc}, indent=1))
if not acc_proc["driver"]:
    print("no NVIDIA driver loaded (/proc/driver/nvidia): run this on a GPU node")
    sys.exit(2)

check("nvidia-smi answers", acc_smi["count"] > 0, acc_smi["gpus"])
check("driver from /proc equals nvidia-smi's", acc_proc["driver"] == acc_smi["driver"],
      f"{acc_proc['driver']} vs {acc_smi['driver']}")  # fmt: skip
check("GPU models from /proc equal nvidia-smi's", acc_proc["gpus"] == acc_smi["gpus"],
      f"{acc_proc['gpus']} vs {acc_smi['gpus']}")  # fmt: skip
pci_ids = smi("pci.device_id")  # "0x233010DE": device, then vendor
wanted = sorted("10de:" + p[2:6].lower() for p in pci_ids)
check("sysfs GPUs equal nvidia-smi's PCI ids", layer["gpu_devices"] == wanted,
      f"{layer['gpu_devices']} vs {wanted}")  # fmt: skip
lsmod = tool("lsmod")
loaded = any(
    line.split()[:1] in (["nvidia_peermem"], ["nv_peer_mem"]) for line in lsmod.splitlines()
)
check("peermem as lsmod says", layer["peermem"] is None or layer["peermem"] == loaded, loaded)
if layer["net_plugin"]:
    import ctypes

    try:
        ctypes.CDLL(os.path.basename(layer["net_plugin"]))
        check("the loader finds the net plugin named", True, layer["net_plugin"])
    except OSError as exc:
        check("the loader finds the net plugin named", False, exc)
else:
    print("--   no NCCL net plugin on this node (nothing to load)")

# A second node: a copy of this one's /proc and /sys files the layer reads, without the
# plugin and with another driver; the gate's fingerprint must differ and say so.
with tempfile.TemporaryDirectory(prefix="envguard-host-") as tmp:
    root = Path(tmp)
    for src in [
        "/proc/driver/nvidia/version",
        *Path("/proc/driver/nvidia/gpus").glob("*/information"),
    ]:
        dest = root / str(src).lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        text = Path(src).read_text()
        if str(src).endswith("version") and acc_proc["driver"]:
            text = text.replace(acc_proc["driver"], "1.2.3")
        dest.write_text(text)
    for dev in Path("/sys/bus/pci/devices").iterdir():
        for key in ("vendor", "class", "device"):
            dest = root / "sys/bus/pci/devices" / dev.name / key
            dest.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):  # not every device has each file
                shutil.copyfile(dev / key, dest)
    live = target.fingerprint.fingerprint({"env": [], "fingerprint_cache": False})
    other = target.fingerprint.fingerprint(
        {"env": [], "fingerprint_cache": False, "host_root": str(root)}
    )
    check("the copy has the same GPUs", other["host"]["gpus"] == live["host"]["gpus"])
    check("the copy's driver differs", other["driver"] == "1.2.3", other["driver"])
    from envguard.blame import differences

    said = differences(live, other)
    check("the gate names the driver", any("NVIDIA driver" in s for s in said), said)
    if live["host"]["net_plugin"]:
        check("the gate names the missing plugin", any("net plugin" in s for s in said), said)

if len(sys.argv) > 1:
    Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
    (Path(sys.argv[1]) / "host_layer.json").write_text(json.dumps(layer, indent=1))
print("FAILED: " + ", ".join(failed) if failed else "all host-layer checks passed")
sys.exit(1 if failed else 0)
