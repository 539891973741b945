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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from envguard.blame import (
    MAX_GROUPS,
    Arrival,
    drift,
    line,
    mismatch_message,
    missing_nodes,
    ranks,
    said,
    snapshot_message,
)
from envguard.compare.layers import gate_fails
from envguard.compare.policy import Policy, load_policy
from envguard.errors import ActionError, EnvguardError, UsageError
from envguard.gatestore import Client, StoreError, closed_by_server, serve_or_join
from envguard.launchers import torchrun_launch
from envguard.probe.payload import code_key, local_entry
from envguard.reading import read_number
from envguard.rendezvous import (
    ANSWER,
    BoundedStore,
    Deadline,
    Store,
    StoreGoneError,
    bounded,
    tcp_store,
)
from envguard.units import seconds

if TYPE_CHECKING:
    from envguard.snapshots.models import Snapshot

# How long a rank waits for the others, unless told (ENVGUARD_GATE_TIMEOUT, seconds).
DEFAULT_TIMEOUT = 120.0
# The longest wait a rank may be given: 11 days.
MOST_TIMEOUT = 1e6
# Variables compared when none are named; the same default as the target side's.
DEFAULT_ENV = ("NCCL_*",)


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
    detail: dict[str, Any] = {
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
    if snapshot.host_layer is not None:  # else not recorded: left out, as NCCL's version
        hostlayer = local_entry("fingerprint").hostlayer
        detail["host"] = hostlayer.gated(snapshot.host_layer.model_dump(mode="json"))
    # What a snapshot recorded of its installed files and libraries (an older one did not:
    # then not compared, rather than read as "as RECORD" and "none").
    live = [p for p in snapshot.packages if not p.shadowed]
    if any(p.on_disk is not None for p in live):
        lists = ("modified", "missing", "added")
        detail["installed"] = {
            p.name: {k: sorted(getattr(p.on_disk, k)) for k in lists}
            for p in live
            if p.on_disk is not None and any(getattr(p.on_disk, k) for k in lists)
        }
    if snapshot.libraries:
        detail["libraries"] = {
            lib.path: [lib.embedded_version, lib.loader_pick] for lib in snapshot.libraries
        }
    return detail


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


@dataclass(frozen=True)
class Against:
    """The snapshot a gate also requires: its name, and how this rank differs from it
    ("" when it does not)."""

    name: str
    said: str


def _published(mine: Fingerprint, host: str, node: str, extra: _Extra) -> str:
    more: dict[str, object] = {"local_world_size": extra.local_world_size}
    if extra.against is not None:
        more["snapshot"] = extra.against.said
    return json.dumps([mine.digest, host, node, more])


def _arrival(rank: int, raw: bytes, unit: str) -> Arrival:
    value = _json(raw)
    if not (isinstance(value, list) and len(value) in (3, 4)):
        raise GateError(f"{unit} {rank} published something other than a fingerprint at the gate")
    digest, host, node = value[:3]
    more = value[3] if len(value) == 4 and isinstance(value[3], dict) else {}
    size, snap = more.get("local_world_size"), more.get("snapshot")
    return Arrival(
        rank,
        line(digest),
        line(host),
        line(node),
        local_world_size=size if isinstance(size, int) and size > 0 else None,
        snapshot=None if snap is None else line(snap, cap=400),
    )


@dataclass(frozen=True)
class _Extra:
    """What a rank publishes beside its hash (its node's rank count and its snapshot word),
    and the policy rank 0 judges by."""

    local_world_size: int | None = None
    against: Against | None = None
    policy: Policy = field(default_factory=Policy)


def _wait(store: BoundedStore, keys: list[str], deadline: Deadline, *, floor: float = 0.05) -> bool:
    """Whether every key arrived before the deadline (:class:`StoreGoneError` when the store
    stopped answering meanwhile)."""
    try:
        store.wait(keys, deadline.left(floor))
    except StoreGoneError:
        raise
    except Exception:  # torch raises DistStoreError (a RuntimeError) on a timeout
        return store.check(keys)
    return True


def _await(store: BoundedStore, key: str, deadline: Deadline, late: Deadline, floor: float) -> bool:
    """Whether ``key`` arrived by ``deadline``, or by ``late`` while the store still answers:
    a frozen store is found out at ``deadline`` (plus ANSWER), not at ``late``."""
    return _wait(store, [key], deadline, floor=floor) or _wait(store, [key], late)


# How much longer than rank 0 the others wait for its verdict: rank 0 may have arrived
# late, and its own deadline runs from then.
_GRACE = 10.0


def exchange(
    store: Store,
    mine: Fingerprint,
    topology: Topology,
    *,
    prefix: str,
    timeout: float,
    host: str,
    node: str,
    server: str | None = None,
    local_world_size: int | None = None,
    against: Against | None = None,
    policy: Policy | None = None,
) -> None:
    """Publish this rank's hash under ``prefix``; rank 0 judges everyone's and publishes one
    verdict, which every rank raises when the environments differ or some ranks never
    arrive. Returns when all agree. Each rank but rank 0 makes a handful of requests,
    whatever the size of the job; rank 0 reads all hashes in one.

    Every wait ends by envguard's own deadline, whatever the store does: a store that
    stops answering (its server frozen or killed, the link down) is a
    :class:`MissingRanksError` naming rank 0 and ``server`` (where the store is) within
    ``timeout`` plus a second.

    ``local_world_size``: how many ranks this node runs (the missing are then placed on
    their nodes); ``against``: the snapshot the gate also requires, and how this rank
    differs from it (rank 0 then blames the nodes that differ from it, not a majority);
    ``policy``: what rank 0 fails on (compare/layers.py: what ``check`` fails on; default:
    the defaults)."""
    rank = topology.rank
    extra = _Extra(local_world_size, against, policy or Policy())
    deadline = Deadline(timeout)
    bounded = _bounded(store, timeout)
    try:
        bounded.set(f"{prefix}/hash/{rank}", _published(mine, host, node, extra))
        if rank == 0:
            verdict = _judge(
                bounded, mine, topology, prefix=prefix, deadline=deadline, host=host, extra=extra
            )
            bounded.set(f"{prefix}/verdict", json.dumps(verdict))
        else:
            late = Deadline(timeout + _GRACE)
            if not _await(bounded, f"{prefix}/wanted", deadline, late, 0.05):
                _no_verdict(bounded, topology, prefix=prefix, timeout=timeout)
            wanted = _json(bounded.get(f"{prefix}/wanted"))
            if isinstance(wanted, list) and rank in wanted:
                bounded.set(f"{prefix}/detail/{rank}", json.dumps(mine.detail, sort_keys=True))
            # Rank 0 may wait for the odd groups' details (up to 5 s) before its verdict.
            if not _await(bounded, f"{prefix}/verdict", deadline, late, 6.0):
                _no_verdict(bounded, topology, prefix=prefix, timeout=timeout)
            verdict = _json(bounded.get(f"{prefix}/verdict"))
    except StoreGoneError as exc:
        raise _gone(exc, topology, host=host, server=server, waited=deadline.elapsed()) from None
    _raise_for(verdict, topology)


def _bounded(store: Store, timeout: float) -> BoundedStore:
    """``store`` with envguard's deadlines (itself when it has them already)."""
    if isinstance(store, BoundedStore):
        return store
    return BoundedStore(store, Deadline(timeout))


def _gone(
    exc: StoreGoneError, topology: Topology, *, host: str, server: str | None, waited: float
) -> MissingRanksError:
    """The one line for a store that stopped answering mid-gate: on rank 0's peers, rank 0
    (whose node serves it, or whose verdict it carries) is the one that did not answer."""
    unit, rank = topology.unit, topology.rank
    where = server or "the gate's store"
    how = "stopped answering" if exc.frozen else "lost its connection"
    who = f"{unit} 0 did not answer at the environment gate: " if rank else ""
    return MissingRanksError(
        f"{who}{where} {how} after {waited:.1f} s (frozen, killed or cut off; {unit} {rank}"
        f" on {line(host)} waited): {exc.reason}",
        f"see {unit} 0's node and its log; ENVGUARD_GATE_TIMEOUT sets the wait",
        missing=(0,) if rank else (),
    )


def _judge(
    store: BoundedStore,
    mine: Fingerprint,
    topology: Topology,
    *,
    prefix: str,
    deadline: Deadline,
    host: str,
    extra: _Extra,
) -> dict[str, Any]:
    """Rank 0's part: wait for every hash; blame the ranks that differ from the snapshot
    when one is asked for, else, when the hashes differ, fetch the detail of one rank of
    each of the largest groups (those ranks are told through ``wanted``)."""
    world, unit = topology.world_size, topology.unit
    keys = [f"{prefix}/hash/{r}" for r in range(world)]
    if not _wait(store, keys, deadline):
        store.set(f"{prefix}/wanted", "[]")
        return _missing(store, keys, topology, deadline=deadline, host=host)
    try:
        arrivals = [_arrival(r, raw, unit) for r, raw in enumerate(store.multi_get(keys))]
    except GateError as exc:  # said by every rank, like any verdict
        store.set(f"{prefix}/wanted", "[]")
        return {"kind": "error", "message": exc.message}
    off = (
        None
        if extra.against is None
        else snapshot_message(arrivals, snapshot=extra.against.name, unit=unit)
    )
    sizes = Counter(a.digest for a in arrivals)
    if len(sizes) == 1 or off is not None:
        store.set(f"{prefix}/wanted", "[]")
        if off is not None:
            return {"kind": "differ", "odd": list(off[1]), "message": off[0], "snapshot": True}
        return {"kind": "same"}
    first: dict[str, int] = {}
    for a in arrivals:
        first.setdefault(a.digest, a.rank)
    by_size = sorted(first, key=lambda d: (-sizes[d], first[d]))
    wanted = [first[d] for d in by_size[: MAX_GROUPS + 1]]
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
    if not _fail(extra.policy, arrivals, details):
        return {"kind": "same"}
    try:
        message, odd = mismatch_message(arrivals, details, unit=unit)
    except (TypeError, AttributeError, IndexError, KeyError):  # a detail of another shape
        message, odd = mismatch_message(arrivals, {0: mine.detail}, unit=unit)
    return {"kind": "differ", "odd": list(odd), "message": message}


def _fail(
    policy: Policy, arrivals: Sequence[Arrival], details: Mapping[int, Mapping[str, Any]]
) -> bool:
    """Whether the nodes' differences reach what the policy fails on, each weighed both ways
    (with two nodes nobody says which side drifted). A group whose representative's detail
    is not known (it died, or more groups than are fetched) fails: unweighed is not passed."""
    reps = list(dict.fromkeys(a.digest for a in sorted(arrivals, key=lambda a: a.rank)))
    first = {a.digest: a.rank for a in sorted(arrivals, key=lambda a: -a.rank)}
    ranks_of = [first[d] for d in reps]
    if any(r not in details for r in ranks_of):
        return True
    ref = details[ranks_of[0]]
    try:
        return any(
            gate_fails(policy, drift(ref, details[r]) + drift(details[r], ref))
            for r in ranks_of[1:]
        )
    except (TypeError, AttributeError, IndexError, KeyError, ValueError):  # another shape
        return True


def _missing(
    store: BoundedStore, keys: list[str], topology: Topology, *, deadline: Deadline, host: str
) -> dict[str, Any]:
    """The verdict when some ranks never came: which, and on which nodes where it can say."""
    world, unit = topology.world_size, topology.unit
    there = store.check_each(keys)
    missing = [r for r, came in enumerate(there) if not came]
    came = [r for r, here in enumerate(there) if here]
    arrivals = []
    for r, raw in zip(came, store.multi_get([keys[r] for r in came]), strict=True):
        try:
            arrivals.append(_arrival(r, raw, unit))
        except GateError:  # garbage from one rank: its node unknown
            continue
    where = missing_nodes(missing, arrivals, unit=unit)
    return {
        "kind": "missing",
        "missing": missing,
        "message": f"{ranks(unit, missing)} of {world} never arrived at the environment gate"
        f" within {deadline.seconds:.3g} s ({where + '; ' if where else ''}{unit} 0 waited at"
        f" {host})",
    }


def _no_verdict(
    store: BoundedStore, topology: Topology, *, prefix: str, timeout: float
) -> NoReturn:
    came = store.check([f"{prefix}/hash/0"])
    what = "stopped before it judged" if came else "never arrived"
    raise MissingRanksError(
        f"{topology.unit} 0 {what} at the environment gate within {timeout:.3g} s"
        f" ({topology.unit} {topology.rank} waited)",
        "see why it did not (its own log); ENVGUARD_GATE_TIMEOUT sets the wait",
        missing=() if came else (0,),
    )


_HINTS = {
    "differ": "envguard diff between a node of each group shows all of it",
    "snapshot": "envguard diff SNAPSHOT on an odd node shows all of it",
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
    message = line(verdict.get("message"), cap=2000)
    if kind == "error":
        raise GateError(message)
    named = verdict.get("odd" if kind == "differ" else "missing")
    listed = tuple(r for r in named if isinstance(r, int)) if isinstance(named, list) else ()
    if kind == "differ":
        hint = _HINTS["snapshot" if verdict.get("snapshot") is True else kind]
        raise InhomogeneousError(message, hint, odd=listed)
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
    try:
        return tcp_store(addr, port, topology.world_size, is_master=is_master, timeout=timeout)
    except StoreGoneError as exc:  # torch's DistNetworkError and its kin, or no answer
        raise GateError(
            f"{topology.unit} {topology.rank}: no rendezvous store at {addr}:{port} within"
            f" {timeout:g} s ({exc.reason})",
            "is MASTER_ADDR reachable from here, and is the port free on the master?",
        ) from None


@dataclass(frozen=True)
class Rendezvous:
    """A store the gate uses, the key prefix within it, whether the gate made it (rank 0
    serving it) rather than joined torchrun's, and where it is, for messages."""

    store: Store
    prefix: str = "envguard/gate"
    made: bool = False
    server: str | None = None


def default_store(
    topology: Topology, *, timeout: float, environ: Mapping[str, str] = os.environ
) -> Rendezvous:
    """The store the gate uses when none is passed.

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
        prefix = f"envguard/gate/{run}/{attempt}"
        return Rendezvous(store, prefix, server=f"torchrun's store at {addr}:{port}")
    if environ.get("ENVGUARD_GATE_PORT"):
        port = _env_int("ENVGUARD_GATE_PORT", environ)
    else:
        port += 1
    store = _tcp_store(addr, port, topology, is_master=topology.rank == 0, timeout=timeout)
    return Rendezvous(store, made=True, server=f"its store at {addr}:{port}")


def _timeout(timeout: float | None, environ: Mapping[str, str]) -> float:
    # One reader of seconds (units.seconds): `inf`, `1e309`, `nan` and `-1` passed here
    # and ended in a traceback (a timedelta too large) once the store was made.
    if timeout is not None:
        return seconds(timeout, option="--timeout", most=MOST_TIMEOUT)
    text = environ.get("ENVGUARD_GATE_TIMEOUT")
    if text is None:
        return DEFAULT_TIMEOUT
    try:
        value = read_number(text)
    except ValueError as exc:
        raise UsageError(f"ENVGUARD_GATE_TIMEOUT: {exc}") from None
    try:
        return seconds(value, option="ENVGUARD_GATE_TIMEOUT", most=MOST_TIMEOUT)
    except UsageError:
        raise UsageError(
            f"ENVGUARD_GATE_TIMEOUT is not a positive number of seconds: {text[:40]!r}"
        ) from None


def _against(
    mine: Fingerprint, snapshot: Snapshot | str | Path, *, env: Sequence[str], policy: Policy
) -> Against:
    """How this rank differs from the snapshot the gate also requires ("" when not enough
    for the policy to fail on: as ``envguard check`` against it would pass)."""
    from envguard.snapshots.store import load

    snap = snapshot if not isinstance(snapshot, (str, Path)) else load(snapshot)
    items = drift(snapshot_detail(snap, env=env), {**mine.detail, "nccl": None})
    return Against(snap.name, said([d.text for d in items]) if gate_fails(policy, items) else "")


def assert_homogeneous(
    snapshot: Snapshot | str | Path | None = None,
    store: Store | None = None,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    env: Sequence[str] = DEFAULT_ENV,
    timeout: float | None = None,
    prefix: str = "envguard/gate",
    policy: Policy | None = None,
) -> Fingerprint:
    """Raise on every rank unless all ranks of the job run one environment (and, with
    ``snapshot``, the one it recorded); call it before ``init_process_group``.

    ``store``: a torch.distributed store every rank reaches (default: torchrun's, else one
    at MASTER_PORT + 1); ``rank``/``world_size`` default to RANK/WORLD_SIZE; ``env``:
    patterns of the variables that must match; ``timeout``: seconds to wait for the other
    ranks (default ENVGUARD_GATE_TIMEOUT, else 120); ``policy``: what fails the gate
    (default: the nearest pyproject.toml's [tool.envguard], as for ``envguard check``)."""
    environ = os.environ
    seconds = _timeout(timeout, environ)
    began = Deadline(seconds)  # the gate's timeout counts from here: see _gate
    topology = Topology(
        rank if rank is not None else _env_int("RANK", environ),
        world_size if world_size is not None else _env_int("WORLD_SIZE", environ),
    )
    if not 0 <= topology.rank < topology.world_size:
        raise UsageError(f"rank {topology.rank} is outside a world of {topology.world_size}")
    rdv = None if store is None else Rendezvous(store, prefix)
    if store is None and topology.world_size > 1:
        rdv = default_store(topology, timeout=seconds, environ=environ)
    node = environ.get("GROUP_RANK") or environ.get("SLURM_NODEID")
    size = environ.get("LOCAL_WORLD_SIZE", "")
    wanted = _Wanted(snapshot, tuple(env), seconds, policy, began)
    lws = int(size) if size.isdigit() else None
    return _gate(rdv, topology, wanted, node=node, local_world_size=lws)


@dataclass(frozen=True)
class _Wanted:
    """What one gate asks: a snapshot to match too, the variables compared, the wait."""

    snapshot: Snapshot | str | Path | None
    env: tuple[str, ...]
    timeout: float
    policy: Policy | None = None  # None: the nearest pyproject.toml's [tool.envguard]
    began: Deadline | None = None  # when the gate began (before it joined the store)


def _gate(
    rdv: Rendezvous | None,
    topology: Topology,
    wanted: _Wanted,
    *,
    node: str | None,
    local_world_size: int | None = None,
) -> Fingerprint:
    """Fingerprint, compare with the snapshot, exchange; when the gate made the store, rank
    0 serves it, and waits for the others' word before it goes. The timeout counts from
    when the gate began: a slow join or a fingerprint that hashed (files written within
    the distribution cache's quiet minute) shortens the wait rather than lengthening the
    gate."""
    started = wanted.began or Deadline(wanted.timeout)
    rules = load_policy() if wanted.policy is None else wanted.policy
    mine = fingerprint(env=wanted.env)
    host = socket.gethostname()
    seconds = started.remaining(_LEAST)
    store = None if rdv is None else _bounded(rdv.store, seconds)
    against, unreadable = None, None
    if wanted.snapshot is not None:
        try:
            against = _against(mine, wanted.snapshot, env=wanted.env, policy=rules)
        except EnvguardError as exc:  # said after the exchange: the others would wait
            unreadable = exc
    linger = _LINGER_FAILED
    try:
        if rdv is not None and store is not None and topology.world_size > 1:
            exchange(
                store,
                mine,
                topology,
                prefix=rdv.prefix,
                timeout=seconds,
                host=host,
                node=node or host,
                server=rdv.server,
                local_world_size=local_world_size,
                against=against,
                policy=rules,
            )
        linger = _LINGER_PASSED
        if unreadable is not None:
            raise unreadable
        if against is not None and against.said:  # no exchange (one rank) said it
            raise InhomogeneousError(
                f"{topology.unit} {topology.rank} on {host} differs from the snapshot"
                f" {against.name}: {against.said}",
                _HINTS["snapshot"],
                odd=(topology.rank,),
            )
    finally:
        if rdv is not None and store is not None:
            serving = rdv.made and topology.rank == 0
            _release(store, topology, prefix=rdv.prefix, linger=linger if serving else None)
    return mine


def gate_launch(
    argv: Sequence[str],
    *,
    snapshot: Snapshot | str | Path | None = None,
    env: Sequence[str] = DEFAULT_ENV,
    timeout: float | None = None,
    policy: Policy | None = None,
) -> Fingerprint:
    """The gate a launcher line runs before ``torchrun ...`` (``argv``): one participant per
    node, through a store of envguard's own (gatestore: torch is not imported) at the
    rendezvous port + 1 (ENVGUARD_GATE_PORT), closed again before torchrun starts. With
    --node-rank (static rendezvous) node rank 0 serves it; with c10d the first participant
    on the endpoint's host does, and the others are numbered as they come."""
    environ = os.environ
    seconds = _timeout(timeout, environ)
    began = Deadline(seconds)  # the gate's timeout counts from here: see _gate
    launch = torchrun_launch(argv, environ)
    if launch.node_rank is not None and not 0 <= launch.node_rank < launch.nnodes:
        raise UsageError(
            f"torchrun --node-rank {launch.node_rank} is outside --nnodes {launch.nnodes}"
        )
    wanted = _Wanted(snapshot, tuple(env), seconds, policy, began)
    if launch.nnodes == 1:
        return _gate(None, Topology(0, 1, "node rank"), wanted, node="0")
    port = launch.port + 1
    if environ.get("ENVGUARD_GATE_PORT"):
        port = _env_int("ENVGUARD_GATE_PORT", environ)
    serve = None if launch.node_rank is None else launch.node_rank == 0
    where = f"{launch.addr}:{port}"
    try:
        client, server = serve_or_join(launch.addr, port, serve=serve, timeout=seconds)
    except StoreError as exc:
        raise GateError(
            f"no environment gate store at {where} within {seconds:g} s ({exc})",
            "is the rendezvous host reachable from here, and is the port free there?",
        ) from None
    try:
        rank = launch.node_rank
        unit = "node rank"
        if rank is None:  # numbered as they come: the server is 0
            unit = "node"
            rank = 0 if server is not None else _arrival_number(client, seconds, where)
            if rank >= launch.nnodes:
                raise GateError(
                    f"more than --nnodes {launch.nnodes} nodes came to the gate at {where}",
                    "is another job using this rendezvous endpoint?",
                )
        rdv = Rendezvous(client, made=server is not None, server=f"its store at {where}")
        topology = Topology(rank, launch.nnodes, unit)
        mine = _gate(rdv, topology, wanted, node=str(rank))
        if server is None:
            # Start torchrun once the serving node starts its own (it closes the store just
            # before): a torchrun whose rendezvous server is not up yet backs off for
            # seconds before it tries again.
            closed_by_server(client, _LINGER_PASSED + ANSWER)
        return mine
    finally:
        client.close()
        if server is not None:
            server.close()


def _arrival_number(client: Client, seconds: float, where: str) -> int:
    """This participant's number, from the server's counter (1, 2, ... as they come)."""
    try:
        return bounded(lambda: client.add("envguard/gate/arrived"), seconds + ANSWER)
    except (StoreGoneError, StoreError) as exc:
        raise GateError(
            f"the environment gate store at {where} stopped answering ({exc})"
        ) from None


# The least wait the exchange is given, however long the fingerprint took.
_LEAST = 1.0

# How long the rank serving the gate's store waits for the others to read the verdict
# before it goes: long when they go on to start the job (one losing the store mid-read
# would stop it), short when the gate failed (every live rank ends within the timeout + 2 s).
_LINGER_PASSED = 10.0
_LINGER_FAILED = 1.0


def _release(store: BoundedStore, topology: Topology, *, prefix: str, linger: float | None) -> None:
    """Say this rank is done with the gate's store; the rank serving it (``linger`` given)
    waits for the word of every rank that arrived before it goes, so none loses the store
    mid-read. Bounded like every call of the gate."""
    try:
        store.set(f"{prefix}/done/{topology.rank}", "1")
        if linger is not None:
            hashes = [f"{prefix}/hash/{r}" for r in range(topology.world_size)]
            came = [r for r, there in enumerate(store.check_each(hashes)) if there]
            _wait(store, [f"{prefix}/done/{r}" for r in came], Deadline(linger))
    except Exception:  # noqa: S110  # the store went (its server exited): nothing to release
        pass
