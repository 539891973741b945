"""The rank gate: before the process group starts, every rank of a job shows it runs the
same environment, through the rendezvous store torch.distributed already has.

Each rank computes its fingerprint in-process (packages with their builds and RECORD
fingerprints, torch's build, the NVIDIA driver, NCCL's version when torch has one, chosen
variables: probe/target/fingerprint.py, read through the probe's distribution cache) and
publishes only its hash, with its host name, under one key of the store. Every rank waits
for all the others' (until a deadline: the ranks that never arrived are named), groups
them, and when they differ the representative of the majority and of each odd group publish
their full fingerprint, so every rank raises the same one-line message: which node differs
and how ("node host-b (rank 1) differs from the majority (1 node, rank 0): six 1.16.0 ->
1.17.0").

torch is imported only when a gate runs, never by ``import envguard``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from envguard.errors import ActionError, UsageError
from envguard.probe.payload import code_key, local_entry
from envguard.reading import read_number

if TYPE_CHECKING:
    from envguard.snapshots.models import Snapshot

# How long a rank waits for the others, unless told (ENVGUARD_GATE_TIMEOUT, seconds).
DEFAULT_TIMEOUT = 120.0
# Variables compared when none are named; the same default as the target side's.
DEFAULT_ENV = ("NCCL_*",)
_MAX_GROUPS = 3  # odd groups whose difference is spelled out; the rest are only named
_MAX_ITEMS = 6  # differences said per group


class Store(Protocol):
    """What the gate uses of a ``torch.distributed.Store`` (TCPStore, FileStore, ...)."""

    def set(self, key: str, value: str | bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...
    def wait(self, keys: list[str], timeout: timedelta) -> None: ...


class GateError(ActionError):
    """The ranks of a job may not start: exit 1."""


class InhomogeneousError(GateError):
    """Some ranks run a different environment from the majority's (or from the snapshot's)."""

    def __init__(self, message: str, hint: str | None = None, *, odd: tuple[int, ...]) -> None:
        super().__init__(message, hint)
        self.odd = odd


class MissingRanksError(GateError):
    """Some ranks never published their fingerprint before the deadline."""

    def __init__(self, message: str, hint: str | None = None, *, missing: tuple[int, ...]) -> None:
        super().__init__(message, hint)
        self.missing = missing


@dataclass(frozen=True)
class Fingerprint:
    """One rank's environment: ``detail`` as plain data, ``digest`` its sha256."""

    digest: str
    detail: dict[str, Any]


@dataclass(frozen=True)
class Topology:
    """Who takes part in one gate: this participant's rank, how many there are, and what a
    participant is called in messages ("rank"; the CLI's launcher form: "node rank")."""

    rank: int
    world_size: int
    unit: str = "rank"


def _digest(detail: Mapping[str, Any]) -> str:
    text = json.dumps(detail, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _torch_nccl() -> str | None:
    """The NCCL torch was built with, when torch is already imported and built for CUDA
    (asked of torch itself: no CUDA context is created)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not getattr(getattr(torch, "version", None), "cuda", None):
        return None
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # a CPU-only build, or no NCCL: nothing to compare
        return None
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)


def fingerprint(*, env: Sequence[str] = DEFAULT_ENV, cache: bool = True) -> Fingerprint:
    """This interpreter's environment fingerprint (cheap once the distribution cache is
    warm: envguard snapshot or an earlier gate filled it)."""
    target = local_entry("fingerprint")
    args = {"env": list(env), "code": code_key("main"), "fingerprint_cache": cache}
    detail: dict[str, Any] = target.fingerprint.fingerprint(args)
    detail["nccl"] = _torch_nccl()
    return Fingerprint(_digest(detail), detail)


def snapshot_detail(snapshot: Snapshot, *, env: Sequence[str] = DEFAULT_ENV) -> dict[str, Any]:
    """A snapshot's facts in a fingerprint's shape, for the comparison with a known-good
    one (the snapshot records no NCCL runtime version: left out of the comparison)."""
    from fnmatch import fnmatchcase

    interp = snapshot.interpreter
    torch = snapshot.torch
    return {
        "python": f"{interp.implementation.lower()} {interp.version}",
        "packages": {
            p.name: [str(p.version), p.fingerprint] for p in snapshot.packages if not p.shadowed
        },
        "torch": None
        if torch is None
        else {
            "version": str(torch.version),
            "cuda": torch.cuda,
            "hip": torch.hip,
            "git_version": torch.git_version,
        },
        "driver": snapshot.accelerator.driver,
        "env": {
            k: v for k, v in sorted(snapshot.env.items()) if any(fnmatchcase(k, p) for p in env)
        },
    }


def _absent(value: object) -> str:
    return "(absent)" if value is None else str(value)


def differences(reference: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """What ``other`` has that ``reference`` has not, one short phrase per difference,
    packages first ("six 1.16.0 -> 1.17.0", "six 1.17.0: files differ")."""
    out: list[str] = []
    ref_pkgs: Mapping[str, Any] = reference.get("packages") or {}
    pkgs: Mapping[str, Any] = other.get("packages") or {}
    for name in sorted(set(ref_pkgs) | set(pkgs)):
        before, after = ref_pkgs.get(name), pkgs.get(name)
        if before is None or after is None:
            out.append(f"{name} {_absent(before and before[0])} -> {_absent(after and after[0])}")
        elif before[0] != after[0]:
            out.append(f"{name} {before[0]} -> {after[0]}")
        elif before[1] != after[1] and before[1] and after[1]:
            out.append(f"{name} {after[0]}: installed files differ (RECORD)")
    for key in ("python", "driver", "nccl"):
        if key in reference and key in other and reference[key] != other[key]:
            label = {"python": "python", "driver": "NVIDIA driver", "nccl": "torch's NCCL"}[key]
            out.append(f"{label} {_absent(reference[key])} -> {_absent(other[key])}")
    ref_torch, torch = reference.get("torch") or {}, other.get("torch") or {}
    for key in ("cuda", "hip", "git_version"):
        if ref_torch and torch and ref_torch.get(key) != torch.get(key):
            out.append(f"torch {key} {_absent(ref_torch.get(key))} -> {_absent(torch.get(key))}")
    ref_env, env = reference.get("env") or {}, other.get("env") or {}
    for name in sorted(set(ref_env) | set(env)):
        if ref_env.get(name) != env.get(name):
            out.append(f"{name}={_unset(ref_env.get(name))} -> {_unset(env.get(name))}")
    return out


def _unset(value: str | None) -> str:
    return "(unset)" if value is None else value


def _said(items: list[str]) -> str:
    if not items:
        return "the fingerprints differ, the details do not say how"
    shown = ", ".join(items[:_MAX_ITEMS])
    more = len(items) - _MAX_ITEMS
    return shown + (f", and {more} more" if more > 0 else "")


def _ranks(unit: str, ranks: Sequence[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8]) + (", ..." if len(ranks) > 8 else "")
    return f"{unit}{'s' if len(ranks) > 1 else ''} {shown}"


@dataclass(frozen=True)
class _Arrival:
    rank: int
    digest: str
    host: str
    node: str  # the launcher's node rank (GROUP_RANK) when it says one, else the host


def _node_names(arrivals: Sequence[_Arrival]) -> dict[int, str]:
    """Each rank's node by name: the host, with the launcher's node rank when several nodes
    share a host name (two launches on one machine)."""
    per_host: dict[str, set[str]] = {}
    for a in arrivals:
        per_host.setdefault(a.host, set()).add(a.node)
    return {
        a.rank: a.host if len(per_host[a.host]) == 1 else f"{a.host}[node {a.node}]"
        for a in arrivals
    }


def _nodes(group: Sequence[_Arrival], names: Mapping[int, str]) -> list[str]:
    return list(dict.fromkeys(names[a.rank] for a in group))


def mismatch_message(
    arrivals: Sequence[_Arrival], details: Mapping[int, Mapping[str, Any]], *, unit: str
) -> tuple[str, tuple[int, ...]]:
    """The one line every rank says, and the odd ranks, from everyone's arrival and the
    representatives' details (a representative's detail may be missing: then unsaid)."""
    groups: dict[str, list[_Arrival]] = {}
    for a in sorted(arrivals, key=lambda a: a.rank):
        groups.setdefault(a.digest, []).append(a)
    # The majority: the most ranks; a tie goes to the group holding the lowest rank.
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0].rank))
    # The odd groups, largest first: the first few said in full (their representatives are
    # the ranks rank 0 asked for details), the rest counted.
    majority, odd = ordered[0], ordered[1:]
    names = _node_names(arrivals)
    maj_nodes = _nodes(majority, names)
    reference = details.get(majority[0].rank)
    parts = []
    for group in odd[:_MAX_GROUPS]:
        nodes = _nodes(group, names)
        more = f" and {len(nodes) - 5} more" if len(nodes) > 5 else ""
        text = f"node {', '.join(nodes[:5])}{more} ({_ranks(unit, [a.rank for a in group])})"
        count = f"{len(maj_nodes)} node{'s' if len(maj_nodes) > 1 else ''}"
        text += f" differs from the majority ({count}, {_ranks(unit, [a.rank for a in majority])})"
        theirs = details.get(group[0].rank)
        if reference is not None and theirs is not None:
            text += ": " + _said(differences(reference, theirs))
        parts.append(text)
    if len(odd) > _MAX_GROUPS:
        rest = odd[_MAX_GROUPS:]
        rest_nodes = {names[a.rank] for g in rest for a in g}
        parts.append(
            f"and {len(rest)} more groups ({len(rest_nodes)} nodes, {sum(map(len, rest))} {unit}s)"
        )
    odd_ranks = tuple(sorted(a.rank for g in odd for a in g))
    return "environments differ across the job: " + "; ".join(parts), odd_ranks


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _line(text: object, cap: int = 64) -> str:
    """Another rank's word, as one short printable line (it goes into every rank's error)."""
    return "".join(c if c.isprintable() else "?" for c in str(text))[:cap]


def _arrival(rank: int, raw: bytes, unit: str) -> _Arrival:
    value = _json(raw)
    if not (isinstance(value, list) and len(value) == 3):
        raise GateError(f"{unit} {rank} published something other than a fingerprint at the gate")
    digest, host, node = value
    return _Arrival(rank, _line(digest), _line(host), _line(node))


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self, floor: float = 0.05) -> timedelta:
        return timedelta(seconds=max(floor, self.end - time.monotonic()))


def _wait(store: Store, keys: list[str], deadline: _Deadline, *, floor: float = 0.05) -> bool:
    """Whether every key arrived before the deadline."""
    try:
        store.wait(keys, deadline.left(floor))
    except Exception:  # torch raises DistStoreError (a RuntimeError) on a timeout
        return store.check(keys)
    return True


# How much longer than rank 0 the others wait for its verdict: rank 0 may have arrived
# late, and its own deadline runs from then.
_GRACE = 10.0


def _get_all(store: Store, keys: list[str]) -> list[bytes]:
    """Every key's value in one request where the store can (multi_get, torch 2.4+)."""
    multi = getattr(store, "multi_get", None)
    if multi is not None:
        return list(multi(keys))
    return [store.get(k) for k in keys]


def exchange(
    store: Store,
    mine: Fingerprint,
    topology: Topology,
    *,
    prefix: str,
    timeout: float,
    host: str,
    node: str,
) -> None:
    """Publish this rank's hash under ``prefix``; rank 0 judges everyone's and publishes one
    verdict, which every rank raises when the environments differ or some ranks never
    arrive. Returns when all agree. Each rank but rank 0 makes a handful of requests,
    whatever the size of the job; rank 0 reads all hashes in one."""
    rank = topology.rank
    deadline = _Deadline(timeout)
    store.set(f"{prefix}/hash/{rank}", json.dumps([mine.digest, host, node]))
    if rank == 0:
        verdict = _judge(store, mine, topology, prefix=prefix, deadline=deadline, host=host)
        store.set(f"{prefix}/verdict", json.dumps(verdict))
    else:
        late = _Deadline(timeout + _GRACE)
        if not _wait(store, [f"{prefix}/wanted"], late):
            _no_verdict(store, topology, prefix=prefix, timeout=timeout)
        wanted = _json(store.get(f"{prefix}/wanted"))
        if isinstance(wanted, list) and rank in wanted:
            store.set(f"{prefix}/detail/{rank}", json.dumps(mine.detail, sort_keys=True))
        if not _wait(store, [f"{prefix}/verdict"], late):
            _no_verdict(store, topology, prefix=prefix, timeout=timeout)
        verdict = _json(store.get(f"{prefix}/verdict"))
    _raise_for(verdict, topology)


def _judge(
    store: Store,
    mine: Fingerprint,
    topology: Topology,
    *,
    prefix: str,
    deadline: _Deadline,
    host: str,
) -> dict[str, Any]:
    """Rank 0's part: wait for every hash, and when they differ, fetch the detail of one
    rank of the majority and of each odd group (those ranks are told through ``wanted``)."""
    world, unit = topology.world_size, topology.unit
    keys = [f"{prefix}/hash/{r}" for r in range(world)]
    if not _wait(store, keys, deadline):
        store.set(f"{prefix}/wanted", "[]")
        missing = [r for r in range(world) if not store.check([keys[r]])]
        return {
            "kind": "missing",
            "missing": missing,
            "message": f"{_ranks(unit, missing)} of {world} never arrived at the environment"
            f" gate within {deadline.seconds:g} s ({unit} 0 waited at {host})",
        }
    try:
        arrivals = [_arrival(r, raw, unit) for r, raw in enumerate(_get_all(store, keys))]
    except GateError as exc:  # said by every rank, like any verdict
        store.set(f"{prefix}/wanted", "[]")
        return {"kind": "error", "message": exc.message}
    sizes = Counter(a.digest for a in arrivals)
    if len(sizes) == 1:
        store.set(f"{prefix}/wanted", "[]")
        return {"kind": "same"}
    first: dict[str, int] = {}
    for a in arrivals:
        first.setdefault(a.digest, a.rank)
    by_size = sorted(first, key=lambda d: (-sizes[d], first[d]))
    wanted = [first[d] for d in by_size[: _MAX_GROUPS + 1]]
    store.set(f"{prefix}/wanted", json.dumps(wanted))
    detail_keys = [f"{prefix}/detail/{r}" for r in wanted if r != 0]
    # A representative that died after publishing its hash leaves the message shorter.
    _wait(store, detail_keys, deadline, floor=5.0)
    details: dict[int, dict[str, Any]] = {0: mine.detail}
    for r in wanted:
        if r and store.check([f"{prefix}/detail/{r}"]):
            detail = _json(store.get(f"{prefix}/detail/{r}"))
            if isinstance(detail, dict):
                details[r] = detail
    try:
        message, odd = mismatch_message(arrivals, details, unit=unit)
    except (TypeError, AttributeError, IndexError, KeyError):  # a detail of another shape
        message, odd = mismatch_message(arrivals, {0: mine.detail}, unit=unit)
    return {"kind": "differ", "odd": list(odd), "message": message}


def _no_verdict(store: Store, topology: Topology, *, prefix: str, timeout: float) -> NoReturn:
    came = store.check([f"{prefix}/hash/0"])
    what = "stopped before it judged" if came else "never arrived"
    raise MissingRanksError(
        f"{topology.unit} 0 {what} at the environment gate within {timeout:g} s"
        f" ({topology.unit} {topology.rank} waited)",
        "see why it did not (its own log); ENVGUARD_GATE_TIMEOUT sets the wait",
        missing=() if came else (0,),
    )


_HINTS = {
    "differ": "envguard diff between a node of the majority and an odd one shows all of it",
    "missing": "see why they did not start (their own logs); ENVGUARD_GATE_TIMEOUT sets the wait",
}


def _raise_for(verdict: object, topology: Topology) -> None:
    """Raise what rank 0's verdict says (the same on every rank); return when all agree."""
    kinds = ("same", "differ", "missing", "error")
    if not isinstance(verdict, dict) or verdict.get("kind") not in kinds:
        raise GateError(f"{topology.unit} 0 published something other than a verdict")
    kind = verdict["kind"]
    if kind == "same":
        return
    message = _line(verdict.get("message"), cap=2000)
    if kind == "error":
        raise GateError(message)
    ranks = verdict.get("odd" if kind == "differ" else "missing")
    listed = tuple(r for r in ranks if isinstance(r, int)) if isinstance(ranks, list) else ()
    if kind == "differ":
        raise InhomogeneousError(message, _HINTS[kind], odd=listed)
    raise MissingRanksError(message, _HINTS[kind], missing=listed)


def _env_int(name: str, environ: Mapping[str, str]) -> int:
    value = environ.get(name)
    if value is not None and value.strip().isdigit():
        try:
            return int(read_number(value, integer=True))
        except ValueError as exc:
            raise UsageError(f"{name}: {exc}") from None
    if value is None or not value.strip().isdigit():
        raise UsageError(
            f"{name} is {'not set' if value is None else f'not a number ({value!r})'}: the"
            " environment gate needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT",
            "torchrun sets them for each rank; on a launcher line, envguard gate --torchrun"
            " -- torchrun ... reads them from its options",
        )
    return int(value)


def _tcp_store(
    addr: str, port: int, topology: Topology, *, is_master: bool, timeout: float
) -> Store:
    import torch.distributed as dist

    try:
        store: Store = dist.TCPStore(
            addr,
            port,
            topology.world_size,
            is_master=is_master,
            timeout=timedelta(seconds=timeout),
            wait_for_workers=False,
        )
    except Exception as exc:  # torch's DistNetworkError and its kin
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GateError(
            f"{topology.unit} {topology.rank}: no rendezvous store at {addr}:{port} within"
            f" {timeout:g} s ({first})",
            "is MASTER_ADDR reachable from here, and is the port free on the master?",
        ) from None
    return store


def default_store(
    topology: Topology, *, timeout: float, environ: Mapping[str, str] = os.environ
) -> tuple[Store, str, bool]:
    """The store the gate uses when none is passed, the key prefix within it, and whether
    the gate made it (rank 0 serving it) rather than joined torchrun's.

    Under torchrun (TORCHELASTIC_USE_AGENT_STORE): its agent's store at MASTER_ADDR:
    MASTER_PORT, keys under the run id and restart count. Otherwise a TCPStore of the
    gate's own, rank 0 serving, at MASTER_PORT + 1 (ENVGUARD_GATE_PORT): init_process_group
    will serve MASTER_PORT itself as soon as the gate returns."""
    addr = environ.get("MASTER_ADDR")
    if not addr:
        _env_int("MASTER_ADDR", {})  # the one message for a missing launcher variable
        raise AssertionError  # unreachable: _env_int raised
    port = _env_int("MASTER_PORT", environ)
    if environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        run = environ.get("TORCHELASTIC_RUN_ID", "none")
        attempt = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = _tcp_store(addr, port, topology, is_master=False, timeout=timeout)
        return store, f"envguard/gate/{run}/{attempt}", False
    if environ.get("ENVGUARD_GATE_PORT"):
        port = _env_int("ENVGUARD_GATE_PORT", environ)
    else:
        port += 1
    store = _tcp_store(addr, port, topology, is_master=topology.rank == 0, timeout=timeout)
    return store, "envguard/gate", True


def _timeout(timeout: float | None, environ: Mapping[str, str]) -> float:
    if timeout is not None:
        return timeout
    text = environ.get("ENVGUARD_GATE_TIMEOUT")
    if text is None:
        return DEFAULT_TIMEOUT
    try:
        value = read_number(text)
    except ValueError as exc:
        raise UsageError(f"ENVGUARD_GATE_TIMEOUT: {exc}") from None
    if not value > 0:
        raise UsageError(f"ENVGUARD_GATE_TIMEOUT is not a positive number of seconds: {text!r}")
    return value


def _check_snapshot(
    mine: Fingerprint, snapshot: Snapshot | str | Path, *, env: Sequence[str], where: str
) -> None:
    from envguard.snapshots.store import load

    snap = snapshot if not isinstance(snapshot, (str, Path)) else load(snapshot)
    items = differences(snapshot_detail(snap, env=env), {**mine.detail, "nccl": None})
    if items:
        raise InhomogeneousError(
            f"{where} differs from the snapshot {snap.name}: {_said(items)}",
            "envguard diff SNAPSHOT on this node shows all of it",
            odd=(),
        )


def assert_homogeneous(
    snapshot: Snapshot | str | Path | None = None,
    store: Store | None = None,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    env: Sequence[str] = DEFAULT_ENV,
    timeout: float | None = None,
    prefix: str = "envguard/gate",
) -> Fingerprint:
    """Raise on every rank unless all ranks of the job run one environment (and, with
    ``snapshot``, the one it recorded); call it before ``init_process_group``.

    ``store``: a torch.distributed store every rank reaches (default: torchrun's, else one
    at MASTER_PORT + 1); ``rank``/``world_size`` default to RANK/WORLD_SIZE; ``env``:
    patterns of the variables that must match; ``timeout``: seconds to wait for the other
    ranks (default ENVGUARD_GATE_TIMEOUT, else 120)."""
    environ = os.environ
    seconds = _timeout(timeout, environ)
    topology = Topology(
        rank if rank is not None else _env_int("RANK", environ),
        world_size if world_size is not None else _env_int("WORLD_SIZE", environ),
    )
    if not 0 <= topology.rank < topology.world_size:
        raise UsageError(f"rank {topology.rank} is outside a world of {topology.world_size}")
    made = False
    if store is None and topology.world_size > 1:
        store, prefix, made = default_store(topology, timeout=seconds, environ=environ)
    node = environ.get("GROUP_RANK") or environ.get("SLURM_NODEID")
    wanted = _Wanted(snapshot, tuple(env), seconds)
    return _gate(store, topology, wanted, prefix=prefix, made=made, node=node)


@dataclass(frozen=True)
class _Wanted:
    """What one gate asks: a snapshot to match too, the variables compared, the wait."""

    snapshot: Snapshot | str | Path | None
    env: tuple[str, ...]
    timeout: float


def _gate(
    store: Store | None,
    topology: Topology,
    wanted: _Wanted,
    *,
    prefix: str,
    made: bool,
    node: str | None,
) -> Fingerprint:
    """Fingerprint, exchange, compare with the snapshot; ``made``: the gate made ``store``
    (rank 0 serves it, and waits for the others' word before it goes)."""
    mine = fingerprint(env=wanted.env)
    host = socket.gethostname()
    try:
        if store is not None and topology.world_size > 1:
            exchange(
                store,
                mine,
                topology,
                prefix=prefix,
                timeout=wanted.timeout,
                host=host,
                node=node or host,
            )
        # After the exchange: a rank stopped here first would leave the others waiting.
        if wanted.snapshot is not None:
            where = f"{topology.unit} {topology.rank} on {host}"
            _check_snapshot(mine, wanted.snapshot, env=wanted.env, where=where)
    finally:
        if store is not None:
            _release(store, topology, prefix=prefix, serving=made and topology.rank == 0)
    return mine


@dataclass(frozen=True)
class Launch:
    """What a torchrun command line says of its job: this node's rank among how many, and
    where its rendezvous is."""

    node_rank: int
    nnodes: int
    addr: str
    port: int


def _option(argv: Sequence[str], names: tuple[str, ...]) -> str | None:
    """The value of the first of ``names`` in ``argv`` (``--name value`` or ``--name=value``),
    looked for before the training script (its own arguments are not torchrun's)."""
    for i, arg in enumerate(argv):
        if arg.endswith(".py") or arg in ("-m", "--module", "--"):
            break
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1 :]
    return None


def _number(text: str, what: str) -> int:
    if not text.isdigit():
        raise UsageError(f"torchrun's {what} is not a number: {text!r}")
    return int(text)


def torchrun_launch(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> Launch:
    """The job a ``torchrun ...`` command line starts, read from its options as torchrun reads
    them (--nnodes, --node-rank, --master-addr, --master-port, --rdzv-endpoint; dashes or
    underscores), with torchrun's defaults."""

    def opt(name: str) -> str | None:
        return _option(argv[1:], (f"--{name}", f"--{name.replace('-', '_')}"))

    nnodes = opt("nnodes") or "1"
    low, _, high = nnodes.partition(":")
    if high and high != low:
        raise UsageError(
            f"torchrun --nnodes {nnodes}: the environment gate needs a fixed number of nodes",
            "gate inside the training script instead (envguard.distributed.assert_homogeneous)",
        )
    endpoint = opt("rdzv-endpoint")
    if endpoint:
        addr, _, port_text = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "")
        port = _number(port_text, "--rdzv-endpoint port") if port_text else 29400
    else:
        addr = opt("master-addr") or environ.get("MASTER_ADDR") or "127.0.0.1"
        port = _number(opt("master-port") or environ.get("MASTER_PORT") or "29500", "--master-port")
    return Launch(
        node_rank=_number(opt("node-rank") or "0", "--node-rank"),
        nnodes=_number(low, "--nnodes"),
        addr=addr,
        port=port,
    )


def gate_launch(
    argv: Sequence[str],
    *,
    snapshot: Snapshot | str | Path | None = None,
    env: Sequence[str] = DEFAULT_ENV,
    timeout: float | None = None,
) -> Fingerprint:
    """The gate a launcher line runs before ``torchrun ...`` (``argv``): one participant per
    node, node rank 0 serving a store at the rendezvous port + 1 (ENVGUARD_GATE_PORT),
    closed again before torchrun starts."""
    environ = os.environ
    seconds = _timeout(timeout, environ)
    launch = torchrun_launch(argv, environ)
    topology = Topology(launch.node_rank, launch.nnodes, "node rank")
    if not 0 <= topology.rank < topology.world_size:
        raise UsageError(
            f"torchrun --node-rank {topology.rank} is outside --nnodes {launch.nnodes}"
        )
    store: Store | None = None
    if topology.world_size > 1:
        port = (
            _env_int("ENVGUARD_GATE_PORT", environ) if environ.get("ENVGUARD_GATE_PORT") else None
        )
        store = _tcp_store(
            launch.addr,
            port or launch.port + 1,
            topology,
            is_master=topology.rank == 0,
            timeout=seconds,
        )
    wanted = _Wanted(snapshot, tuple(env), seconds)
    node = str(launch.node_rank)
    return _gate(store, topology, wanted, prefix="envguard/gate", made=True, node=node)


def _release(store: Store, topology: Topology, *, prefix: str, serving: bool) -> None:
    """Say this rank is done with the gate's store; the rank serving it waits (briefly) for
    the word of every rank that arrived before it goes, so none loses the store mid-read."""
    try:
        store.set(f"{prefix}/done/{topology.rank}", "1")
        if serving:
            ranks = range(topology.world_size)
            came = [r for r in ranks if store.check([f"{prefix}/hash/{r}"])]
            _wait(store, [f"{prefix}/done/{r}" for r in came], _Deadline(10.0))
    except Exception:  # noqa: S110  # the store went (its server exited): nothing to release
        pass
