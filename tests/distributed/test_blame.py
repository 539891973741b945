"""Who the gate blames: both sides when there is no majority (two nodes, any tie), the
nodes that differ from the snapshot when one is asked for, and each missing rank's node."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from distributed.test_gate import MemoryStore, _detail, _fp
from envguard.distributed import (
    Against,
    InhomogeneousError,
    MissingRanksError,
    Topology,
    assert_homogeneous,
    exchange,
)


def _job(
    details: list[dict[str, Any] | None],
    hosts: list[str],
    *,
    local_world_size: int | None = None,
    against: list[Against] | None = None,
    timeout: float = 5.0,
) -> list[BaseException | None]:
    """Every rank's exchange in a thread; None in ``details``: a rank that never comes."""
    store = MemoryStore()
    errors: list[BaseException | None] = [None] * len(details)

    def one(rank: int, detail: dict[str, Any]) -> None:
        try:
            exchange(
                store,
                _fp(detail),
                Topology(rank, len(details)),
                prefix="b",
                timeout=timeout,
                host=hosts[rank],
                node=hosts[rank],
                local_world_size=local_world_size,
                against=None if against is None else against[rank],
            )
        except BaseException as exc:  # handed to the test
            errors[rank] = exc

    threads = [threading.Thread(target=one, args=a) for a in enumerate(details) if a[1]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def _said(errors: list[BaseException | None]) -> str:
    """The one message every rank that came raised."""
    messages = {str(e) for e in errors if e is not None}
    assert len(messages) == 1, messages
    return messages.pop()


def test_two_nodes_with_node_0_drifted_name_both_sides_not_the_clean_one() -> None:
    drifted, clean = _detail(six="1.17.0"), _detail(six="1.16.0")
    errors = _job([drifted] * 4 + [clean] * 4, ["gpu01"] * 4 + ["gpu02"] * 4)
    assert all(isinstance(e, InhomogeneousError) and e.odd == tuple(range(8)) for e in errors)
    assert _said(errors) == (
        "environments differ across the job, no majority: node gpu01 (ranks 0, 1, 2, 3)"
        " vs node gpu02 (ranks 4, 5, 6, 7): six 1.17.0 -> 1.16.0"
    )


def test_a_tie_at_the_top_is_no_majority_and_the_smaller_group_is_named_too() -> None:
    a, b, c = _detail(six="1.0"), _detail(six="2.0"), _detail(six="3.0")
    errors = _job([a, a, b, b, c], ["n1", "n1", "n2", "n2", "n3"])
    assert _said(errors) == (
        "environments differ across the job, no majority: node n1 (ranks 0, 1) vs node n2"
        " (ranks 2, 3): six 1.0 -> 2.0; vs node n3 (rank 4): six 1.0 -> 3.0"
    )


def test_a_real_majority_still_blames_the_odd_node_only() -> None:
    good, odd = _detail(six="1.16.0"), _detail(six="1.17.0")
    errors = _job([odd, good, good], ["n0", "n1", "n2"])
    assert all(isinstance(e, InhomogeneousError) and e.odd == (0,) for e in errors)
    assert _said(errors).startswith(
        "environments differ across the job: node n0 (rank 0) differs from the majority"
        " (2 nodes, ranks 1, 2): six 1.16.0 -> 1.17.0"
    )


def test_with_a_snapshot_the_nodes_that_differ_from_it_are_blamed() -> None:
    """Two nodes, node 0 drifted: no majority, but the snapshot says which side is wrong."""
    drifted, clean = _detail(six="1.17.0"), _detail(six="1.16.0")
    off, ok = Against("good", "six 1.16.0 -> 1.17.0"), Against("good", "")
    errors = _job(
        [drifted, drifted, clean, clean], ["a", "a", "b", "b"], against=[off, off, ok, ok]
    )
    assert all(isinstance(e, InhomogeneousError) and e.odd == (0, 1) for e in errors)
    assert (
        _said(errors) == "node a (ranks 0, 1) differs from the snapshot good: six 1.16.0 -> 1.17.0"
    )


def test_missing_ranks_are_placed_on_their_nodes() -> None:
    same = _detail(six="1.0")
    hosts = ["gpu01", "gpu01", "gpu02", "gpu02", "gpu03", "gpu03"]
    # Rank 3 of gpu02 never came, nor did any rank of the third node.
    errors = _job([same, same, same, None, None, None], hosts, local_world_size=2, timeout=0.3)
    assert isinstance(errors[0], MissingRanksError) and errors[0].missing == (3, 4, 5)
    assert _said(errors) == (
        "ranks 3, 4, 5 of 6 never arrived at the environment gate within 0.3 s (node gpu02:"
        " rank 3; node rank 2: ranks 4, 5; rank 0 waited at gpu01)"
    )


@pytest.fixture
def job_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GROUP_RANK", "SLURM_NODEID", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def test_the_gate_with_a_snapshot_blames_on_every_rank(job_env: None) -> None:
    """assert_homogeneous on two ranks of this venv against a snapshot of it with pytest
    changed: both ranks say the same line, naming the node and the package."""
    import envguard

    snap = envguard.snapshot(python=sys.executable)
    pkgs = tuple(
        p.model_copy(update={"version": "0.0.1"}) if p.name == "pytest" else p
        for p in snap.packages
    )
    changed = snap.model_copy(update={"packages": pkgs})
    store = MemoryStore()
    errors: list[BaseException | None] = [None, None]

    def one(rank: int) -> None:
        try:
            assert_homogeneous(changed, store, rank=rank, world_size=2, timeout=20)
        except BaseException as exc:  # handed to the test
            errors[rank] = exc

    threads = [threading.Thread(target=one, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(isinstance(e, InhomogeneousError) and e.odd == (0, 1) for e in errors)
    message = _said(errors)
    assert message.startswith("node ") and "(ranks 0, 1) differs from the snapshot " in message
    assert "pytest 0.0.1 -> " in message
