"""Capture through a command prefix (`--via`), and many hosts at once (`--hosts`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from envguard.errors import EnvguardError, UsageError
from envguard.lifecycle import kill_running
from envguard.snapshots.capture import capture_snapshot
from envguard.snapshots.request import CaptureRequest

if TYPE_CHECKING:
    from envguard.snapshots.models import Snapshot

# A host as ssh, srun, docker or kubectl take it (IPv6 too: `::1`, `[::1]`, `fe80::1%eth0`):
# never an option (no leading -), never shell syntax, never a path (no /).
_HOST = re.compile(r"^[A-Za-z0-9_:\[][A-Za-z0-9_.@:%\[\]-]{0,252}$")


def check_host(host: str, *, source: str = "--hosts") -> str:
    """``host``, or a UsageError naming ``source`` (where the name came from)."""
    if not _HOST.match(host) or host in (".", ".."):
        raise UsageError(
            f"{source}: {host!r} is not a host name (letters, digits, . _ - @ : [ ] %)"
        )
    return host


def parse_hosts(spec: str, *, cwd: Path | None = None) -> list[str]:
    """``a,b,c`` or ``@hostfile`` (one host a line, # comments) -> validated host names."""
    if spec.startswith("@"):
        path = (cwd or Path.cwd()) / spec[1:]
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--hosts {spec}: cannot read {path} ({exc.strerror})") from None
        items = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    else:
        items = [item.strip() for item in spec.split(",")]
    hosts = [check_host(h) for h in items if h]
    if not hosts:
        raise UsageError(f"--hosts {spec}: no host names")
    return _once_each(hosts)


def host_names(hosts: str | Sequence[str]) -> list[str]:
    """``--hosts`` as given (a spec, see parse_hosts) or a list from the API: validated,
    each once (two captures of one host would race for one file)."""
    if isinstance(hosts, str):
        return parse_hosts(hosts)
    return _once_each([check_host(h) for h in hosts])


def _once_each(hosts: list[str]) -> list[str]:
    if len(set(hosts)) != len(hosts):
        dup = next(h for h in hosts if hosts.count(h) > 1)
        raise UsageError(f"--hosts: {dup} is listed twice")
    return hosts


def prefix_for(via: tuple[str, ...], host: str) -> tuple[str, ...]:
    """The prefix with {host} filled in token by token, so a host can never add a token."""
    return tuple(token.replace("{host}", host) for token in via)


@dataclass
class HostResult:
    """One host of a fleet capture: its snapshot (and where it was written), or its error."""

    host: str
    snapshot: Snapshot | None = None
    error: str | None = None
    path: Path | None = None


def capture_hosts(
    request: CaptureRequest,
    hosts: list[str],
    *,
    jobs: int,
    on_done: Callable[[HostResult], None] = lambda _: None,
) -> list[HostResult]:
    """Capture every host in parallel (at most ``jobs`` at once); failures are results too."""
    if not any("{host}" in token for token in request.via):
        raise UsageError("--hosts needs {host} in --via, e.g. --via 'ssh {host}'")
    if jobs < 1:
        raise UsageError(f"--jobs {jobs}: must be at least 1")

    def one(host: str) -> HostResult:
        try:
            snap = capture_snapshot(
                replace(
                    request,
                    via=prefix_for(request.via, host),
                    name=f"{request.name}-{host}",
                    python_label=f"{host}",
                )
            )
        except EnvguardError as exc:
            return HostResult(host=host, error=exc.message)
        return HostResult(host=host, snapshot=snap)

    results: dict[str, HostResult] = {}
    pool = ThreadPoolExecutor(max_workers=min(jobs, len(hosts)))
    try:
        futures = [pool.submit(one, host) for host in hosts]
        for future in as_completed(futures):
            result = future.result()
            results[result.host] = result
            on_done(result)
    except BaseException:  # Ctrl-C: start nothing more, stop what runs, then give up
        pool.shutdown(wait=False, cancel_futures=True)
        kill_running()
        raise
    finally:
        pool.shutdown(wait=True)
    return [results[h] for h in hosts]
