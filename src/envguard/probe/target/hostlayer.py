"""The host under the venv: what a node gives every environment on it and NCCL reads before
the first collective. The GPUs on the PCI bus, the NCCL config files and net plugins the
loader would find (NVIDIA/nccl#1634: a plugin missing on some nodes), GPUDirect RDMA
(nvidia_peermem), the InfiniBand devices and OFED, the container image.

Files only, every read bounded (reading.py), nothing started; ``root`` prefixes every
absolute path so tests read fake /proc, /sys and /etc trees. The kernel release and glibc
are recorded with the interpreter (its markers and libc); the driver and GPU models with
the accelerator (system.py).
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import stat

from .reading import SMALL_CAP, UNSAFE_CHARS, Regex, open_regular, read_text
from .redact import is_secret_name, secret_digest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

NVIDIA_VENDOR = "0x10de"
# PCI class 0x03xxxx: display controllers (VGA 0x0300, 3D 0x0302); NVSwitch is 0x0680.
_DISPLAY_CLASS = "0x03"
_PLUGIN = Regex(r"\Alibnccl-net[A-Za-z0-9_.+-]*\.so(?:\.[0-9]+)*\Z")
# Compiled when an nccl.conf is read (most nodes have none).
_NCCL_LINE = r"\A\s*(NCCL_[A-Za-z0-9_]{1,64})\s*=\s*(.*?)\s*\Z"
_OFED = Regex(r"(MLNX_OFED_LINUX-[0-9][A-Za-z0-9.-]{0,60}|OFED-internal-[0-9][\w.-]{0,60})")
_RUNTIMES = ("docker", "cri-containerd", "crio", "libpod")
_CGROUP_ID = Regex(r"(?:docker|cri-containerd|crio|libpod)[-/]([0-9a-f]{64})")
# What the host refuses in a line of text (a control or bidi character, an undecodable byte)
_UNSAFE = Regex("[" + UNSAFE_CHARS + "\ud800-\udfff]")
# Bounds: a hostile or broken node must not make the probe list or hash without end.
MAX_ENTRIES = 4096  # names looked at per directory
LIB_ENTRIES = 1 << 17  # in a library directory (a big node's /usr/lib/x86_64-linux-gnu)
MAX_LISTED = 64  # devices, plugins, keys kept
PLUGIN_CAP = 256 << 20  # bytes hashed per plugin
DEFAULT_LIB_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")


def _names(path: str, match: Optional[Any] = None, limit: int = MAX_ENTRIES) -> List[str]:
    """The names in ``path`` (those ``match`` takes), sorted; at most ``limit`` entries are
    looked at, so a huge or hostile directory costs a bounded walk."""
    out = []
    try:
        with os.scandir(path) as it:
            for seen, entry in enumerate(it):
                if seen >= limit:
                    break
                if match is None or match(entry.name):
                    out.append(entry.name)
    except OSError:
        return []
    return sorted(out)


def _line(text: Optional[str], cap: int = 200) -> Optional[str]:
    if text is None:
        return None
    text = text.strip()
    # A printable text holds none of _UNSAFE's characters (controls, format characters,
    # line separators, lone surrogates): told without re, which every probe would load.
    text = (text if text.isprintable() else _UNSAFE.sub(" ", text))[:cap]
    return text or None


def _first_line(path: str) -> Optional[str]:
    text = read_text(path, 64 << 10)
    return _line(text.splitlines()[0]) if text and text.strip() else None


def sha256_file(path: str, cap: int = PLUGIN_CAP) -> Optional[str]:
    """The sha256 of a regular file of at most ``cap`` bytes; None otherwise."""
    try:
        fd = open_regular(path)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size > cap:
            return None
        import hashlib  # here: loading it (and OpenSSL) costs a probe that hashes nothing

        digest = hashlib.sha256()
        total = 0
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            total += len(block)
            if total > cap:
                return None
            digest.update(block)
        return digest.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def gpu_devices(root: str = "") -> List[str]:
    """The NVIDIA GPUs on the PCI bus as "vendor:device" ids ("10de:2330"), one per GPU,
    from sysfs (seen with or without a driver loaded); [] without sysfs."""
    from .distcache import hex_digits

    base = root + "/sys/bus/pci/devices"
    out = []
    for name in _names(base):
        folder = base + "/" + name
        if (read_text(folder + "/vendor", 64) or "").strip() != NVIDIA_VENDOR:
            continue
        if not (read_text(folder + "/class", 64) or "").strip().startswith(_DISPLAY_CLASS):
            continue
        device = (read_text(folder + "/device", 64) or "").strip()
        if device[:2] == "0x" and hex_digits(device[2:], 4):
            out.append("10de:" + device[2:])
        if len(out) >= MAX_LISTED:
            break
    return sorted(out)


def nccl_conf(path: str, shown: str) -> Optional[Dict[str, Any]]:
    """An NCCL config file's sha256 and the NCCL_* keys it sets; None when absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return {"path": shown, "sha256": None, "keys": {}, "error": "not a regular file"}
    text = read_text(path, SMALL_CAP)
    if text is None:
        return {"path": shown, "sha256": None, "keys": {}, "error": "cannot be read"}
    import re  # where there is a file (most nodes have none): not at every probe

    keys: Dict[str, str] = {}
    for raw in text.splitlines():
        match = re.match(_NCCL_LINE, raw)
        if match and not raw.lstrip().startswith("#") and len(keys) < MAX_LISTED:
            name, value = match.group(1), _line(match.group(2)) or ""
            # A secret-looking key is kept as a salted hash, as in the environment section.
            keys[name] = secret_digest(name, value) if is_secret_name(name) else value
    import hashlib

    digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()
    return {"path": shown, "sha256": digest, "keys": keys, "error": None}


def conf_files(environ: Dict[str, str], root: str = "") -> List[Dict[str, Any]]:
    """What NCCL's initEnv reads: $NCCL_CONF_FILE (else ~/.nccl.conf), then /etc/nccl.conf
    (its values under the user's, which win). The user's file is shown as ~/.nccl.conf, the
    same name on every node whoever runs there."""
    out = []
    named = environ.get("NCCL_CONF_FILE")
    if named:
        user = nccl_conf(root + named if named.startswith("/") else named, named)
    else:
        home = environ.get("HOME") or ""
        user = nccl_conf(root + home + "/.nccl.conf", "~/.nccl.conf") if home else None
    for found in (user, nccl_conf(root + "/etc/nccl.conf", "/etc/nccl.conf")):
        if found is not None:
            out.append(found)
    return out


def loader_dirs(environ: Dict[str, str], root: str = "") -> List[str]:
    """Where dlopen("libnccl-net.so") looks, in its order: LD_LIBRARY_PATH, the directories
    ld.so.conf gives ldconfig (the cache's), the default paths."""
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")]
    dirs += _conf_dirs(root + "/etc/ld.so.conf", root)
    dirs += list(DEFAULT_LIB_DIRS)
    seen = set()
    out = []
    for d in dirs:
        d = os.path.normpath(d)
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out[:MAX_LISTED]


def _conf_dirs(conf: str, root: str, depth: int = 0) -> List[str]:
    """The directories an ld.so.conf names, its includes followed (read under ``root``,
    two levels deep at most)."""
    text = read_text(conf, SMALL_CAP) or ""
    out: List[str] = []
    for raw in text.splitlines()[:MAX_ENTRIES]:
        line = raw.split("#", 1)[0].strip()
        if line.startswith("/"):
            out.append(line)
        elif line.startswith("include") and depth < 2:
            folder, glob = os.path.split(line[len("include") :].strip())
            # ldconfig reads a relative include from the including file's folder.
            where = (
                root + folder
                if folder.startswith("/")
                else os.path.join(os.path.dirname(conf), folder)
            )
            for name in _names(where):
                if glob_match(name, glob):
                    out += _conf_dirs(where + "/" + name, root, depth + 1)
    return out


def glob_match(name: str, pattern: str) -> bool:
    """``fnmatch.fnmatchcase(name, pattern)``; a pattern whose only wildcard is ``*`` (an
    include's ``*.conf``) told by string operations: fnmatch imports re, and with it enum
    (8 ms of every probe's CPU, for one line of /etc/ld.so.conf)."""
    if "?" in pattern or "[" in pattern:
        import fnmatch

        return fnmatch.fnmatchcase(name, pattern)
    parts = pattern.split("*")
    if len(parts) == 1:
        return name == pattern
    first, last = parts[0], parts[-1]
    if len(name) < len(first) + len(last) or not (name.startswith(first) and name.endswith(last)):
        return False
    at, end = len(first), len(name) - len(last)
    for part in parts[1:-1]:  # each as early as it can be: what follows has the most room
        at = name.find(part, at, end)
        if at < 0:
            return False
        at += len(part)
    return True


def wanted_plugin(environ: Dict[str, str]) -> List[str]:
    """The file names NCCL tries for its net plugin, in order: NCCL_NET_PLUGIN=X gives
    libnccl-net-X.so then X itself; unset, libnccl-net.so; "none" turns plugins off."""
    value = environ.get("NCCL_NET_PLUGIN")
    if value is None or value == "":
        return ["libnccl-net.so"]
    if value.lower() == "none":
        return []
    return ["libnccl-net-%s.so" % value, value]


class Kept:
    """The distribution cache (distcache.DistCache's lib/keep_lib) and its stamp function,
    for what the host layer reads at every probe: the plugin names in each library folder,
    under the folder's stamp (adding, removing or renaming a file moves its mtime), and a
    plugin's sha256 under the file's. Passed in by the probe: the rank gate's fingerprint
    reads the layer without a cache."""

    def __init__(self, cache: Any, stamp: Callable[[str], Optional[str]]) -> None:
        self.cache, self.stamp = cache, stamp

    def get(self, kind: str, path: str, field: str) -> Tuple[Any, str, Optional[str]]:
        """(what is kept for ``path``, or None; its key; its stamp now)."""
        real = os.path.realpath(path)
        key, stamp = kind + "\0" + real, self.stamp(real)
        held = self.cache.lib(key, stamp)
        return (held.get(field) if held is not None else None), key, stamp


def _plugin_file(name: str) -> bool:
    """_PLUGIN matches ``name`` (re is loaded for a name that begins as a plugin's only: a
    library folder holds thousands of others, at every probe)."""
    return name.startswith("libnccl-net") and bool(_PLUGIN.match(name))


def _plugins_in(folder: str, kept: Optional[Kept]) -> List[str]:
    """The plugin names in ``folder`` (a library folder: up to LIB_ENTRIES looked at)."""
    if kept is None:
        return _names(folder, _plugin_file, LIB_ENTRIES)
    held, key, stamp = kept.get("PLUGINS", folder, "names")
    if type(held) is list and all(type(n) is str and _plugin_file(n) for n in held):
        return held
    names = _names(folder, _plugin_file, LIB_ENTRIES)
    kept.cache.keep_lib(key, stamp, {"names": names})
    return names


def _plugin_sha256(path: str, kept: Optional[Kept]) -> Optional[str]:
    if kept is None:
        return sha256_file(path)
    from .distcache import hex_digits

    held, key, stamp = kept.get("PLUGIN", path, "sha256")
    if type(held) is str and hex_digits(held, 64):
        return held
    digest = sha256_file(path)
    if digest is not None:
        kept.cache.keep_lib(key, stamp, {"sha256": digest})
    return digest


def net_plugins(
    environ: Dict[str, str], root: str = "", kept: Optional[Kept] = None
) -> Dict[str, Any]:
    """The libnccl-net*.so files on the loader's path (name, directory, sha256), and the one
    NCCL would load (the first of the names it tries, in the loader's order)."""
    found: List[Dict[str, Any]] = []
    for folder in loader_dirs(environ, root):
        for name in _plugins_in(root + folder, kept):
            if len(found) < MAX_LISTED:
                path = folder + "/" + name
                digest = _plugin_sha256(root + path, kept)
                found.append({"name": name, "path": path, "sha256": digest})
    chosen = None
    for name in wanted_plugin(environ):
        if "/" in name:
            chosen = name if os.path.isfile(root + name) else None
        else:
            chosen = next((f["path"] for f in found if f["name"] == name), None)
        if chosen:
            break
    return {"net_plugins": found, "net_plugin": chosen}


def ofed(root: str = "") -> Optional[str]:
    """The OFED release: mlx5_core's module version (MLNX_OFED's driver says one; the
    kernel's own does not), else the one ofed_info prints (it is a script that holds it)."""
    for script in ("/usr/bin/ofed_info", "/usr/sbin/ofed_info"):
        text = read_text(root + script, SMALL_CAP)
        match = _OFED.search(text) if text else None  # (most nodes have no ofed_info)
        if match:
            return match.group(1).rstrip(".:-")
    return _first_line(root + "/sys/module/mlx5_core/version")


def infiniband(root: str = "") -> List[str]:
    """The RDMA devices (/sys/class/infiniband) with their firmware: "mlx5_0 fw 28.39.1002"."""
    base = root + "/sys/class/infiniband"
    out = []
    for name in _names(base)[:MAX_LISTED]:
        fw = _first_line(base + "/" + name + "/fw_ver")
        out.append(_line(name + (" fw " + fw if fw else "")) or name)
    return out


def peermem(root: str = "") -> Optional[bool]:
    """Whether GPUDirect RDMA's module is loaded (nvidia_peermem, or the older nv_peer_mem);
    None where /sys/module cannot be read."""
    if not os.path.isdir(root + "/sys/module"):
        return None
    return any(os.path.isdir(root + "/sys/module/" + m) for m in ("nvidia_peermem", "nv_peer_mem"))


def image_digest(value: Optional[str]) -> Optional[str]:
    """The image digest ``value`` names, as "sha256:" and 64 lowercase hex digits (blanks
    around it and a "sha256:" before it allowed), else None (told without re: a probe in
    a container asks at every run)."""
    from .distcache import hex_digits

    text = (value or "").strip()
    text = text[len("sha256:") :] if text.startswith("sha256:") else text
    return "sha256:" + text if hex_digits(text, 64) else None


def container(environ: Dict[str, str], root: str = "") -> Optional[Dict[str, Any]]:
    """The container this runs in, as far as the runtime says from inside: podman's
    /run/.containerenv (image and image id), apptainer's variables (the image file), docker
    (/.dockerenv) or Kubernetes (its variables) with the id from /proc/1/cgroup. None
    outside any container it can tell."""
    runtime = image = digest = ident = None
    fields: Dict[str, str] = {}
    text = read_text(root + "/run/.containerenv", 64 << 10)
    if text is not None:
        runtime = "podman"
        for raw in text.splitlines():
            key, _, value = raw.partition("=")
            fields[key.strip()] = value.strip().strip('"')
        image, digest = fields.get("image"), image_digest(fields.get("imageid"))
        ident = fields.get("id")
    sif = environ.get("APPTAINER_CONTAINER") or environ.get("SINGULARITY_CONTAINER")
    if runtime is None and sif:
        runtime = "apptainer" if environ.get("APPTAINER_CONTAINER") else "singularity"
        image = sif
    if runtime is None and os.path.exists(root + "/.dockerenv"):
        runtime = "docker"
    if runtime is None and environ.get("KUBERNETES_SERVICE_HOST"):
        runtime = "kubernetes"
    if runtime is None:
        return None
    if ident is None:
        text = read_text(root + "/proc/1/cgroup", 64 << 10) or ""
        # (a cgroup v2 host says "0::/": no runtime's name, and no re loaded to tell it)
        match = _CGROUP_ID.search(text) if any(r in text for r in _RUNTIMES) else None
        ident = match.group(1) if match else None
    # Set by the operator (a job template, an entrypoint): the only digest docker and
    # Kubernetes expose inside; the names are envguard's own convention.
    digest = digest or image_digest(environ.get("ENVGUARD_IMAGE_DIGEST"))
    image = image or environ.get("ENVGUARD_IMAGE")
    return {
        "runtime": runtime,
        "image": _line(image, 400),
        "digest": digest,
        "id": _line(ident, 80),
    }


def host_layer(
    environ: Dict[str, str], root: str = "", kept: Optional[Kept] = None
) -> Dict[str, Any]:
    """Everything above, as plain JSON-able data (the report's ``host_layer``)."""
    out: Dict[str, Any] = {
        "gpu_devices": gpu_devices(root),
        "nccl_conf": conf_files(environ, root),
        "peermem": peermem(root),
        "infiniband": infiniband(root),
        "ofed": ofed(root),
        "container": container(environ, root),
    }
    out.update(net_plugins(environ, root, kept))
    return out


def gated(layer: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The part of a host layer (as the report or a snapshot document holds it) that must be
    the same on every node of a job: the GPUs, the net plugins and the one NCCL loads, the
    NCCL config files, peermem. The rank gate's fingerprint holds this, from the live node
    or from a snapshot alike, so the two are compared field for field."""
    if layer is None:
        return None
    return {
        "gpus": list(layer.get("gpu_devices") or []),
        "net_plugins": sorted(
            "%s %s" % (p.get("name"), p.get("sha256")) for p in layer.get("net_plugins") or []
        ),
        "net_plugin": os.path.basename(layer.get("net_plugin") or "") or None,
        "nccl_conf": sorted(
            "%s %s" % (c.get("path"), c.get("sha256")) for c in layer.get("nccl_conf") or []
        ),
        "peermem": layer.get("peermem"),
    }
