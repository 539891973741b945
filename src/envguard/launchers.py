"""A torchrun command line read as torchrun reads it: its own argparse options (long and
underscore spellings, unique abbreviations, ``--opt=value``), their ``PET_*`` variables
(torchrun's defaults from the environment, as Kubeflow's PyTorchJob sets them), launched
as ``torchrun`` or ``python -m torch.distributed.run``. Built without importing torch (the
launcher gate must not pay for it); tests/distributed hold this list to the installed
torch's own parser.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from envguard.errors import UsageError

# torchrun's options (torch/distributed/run.py, get_args_parser): name, default, and
# whether it is a flag (store_true, also read from PET_<NAME> = 1).
_OPTIONS: tuple[tuple[str, Any, bool], ...] = (
    ("nnodes", "1:1", False),
    ("nproc-per-node", "1", False),
    ("rdzv-backend", "static", False),
    ("rdzv-endpoint", "", False),
    ("rdzv-id", "none", False),
    ("rdzv-conf", "", False),
    ("standalone", False, True),
    ("max-restarts", "0", False),
    ("monitor-interval", "0.1", False),
    ("start-method", "spawn", False),
    ("event-log-handler", "null", False),
    ("role", "default", False),
    ("module", False, True),
    ("no-python", False, True),
    ("run-path", False, True),
    ("log-dir", None, False),
    ("redirects", "0", False),
    ("tee", "0", False),
    ("local-ranks-filter", "", False),
    ("duplicate-stdout-filters", None, False),
    ("duplicate-stderr-filters", None, False),
    ("node-rank", "0", False),
    ("master-addr", "127.0.0.1", False),
    ("master-port", None, False),
    ("local-addr", None, False),
    ("logs-specs", None, False),
    ("numa-binding", None, False),
    ("signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT", False),
    ("shutdown-timeout", None, False),
    ("virtual-local-rank", False, True),
)
# Options that take no underscore spelling, and short ones.
_PLAIN = frozenset({"nnodes", "standalone", "role", "module"})
_SHORT = {"module": "-m", "redirects": "-r", "tee": "-t"}
# Options read from the environment by torchrun's own argparse actions (env, check_env).
_NO_ENV = frozenset({"logs-specs", "numa-binding"})
RUN_MODULES = ("torch.distributed.run",)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"torchrun command line: {message}")


def option_strings() -> set[str]:
    """Every option string torchrun accepts, as this module declares them."""
    out = set()
    for name, _, _ in _OPTIONS:
        out.add(f"--{name}")
        if name not in _PLAIN:
            out.add(f"--{name.replace('-', '_')}")
        if name in _SHORT:
            out.add(_SHORT[name])
    return out | {"-h", "--help"}


def _parser(environ: Mapping[str, str]) -> _Parser:
    parser = _Parser(prog="torchrun", add_help=False, exit_on_error=False)
    parser.add_argument("-h", "--help", action="store_true")
    for name, default, flag in _OPTIONS:
        spellings = [_SHORT[name]] if name in _SHORT else []
        spellings.append(f"--{name}")
        if name not in _PLAIN:
            spellings.append(f"--{name.replace('-', '_')}")
        env = f"PET_{name.replace('-', '_').upper()}"
        if flag:
            on = name not in _NO_ENV and environ.get(env) == "1"
            parser.add_argument(*spellings, action="store_true", default=on)
        else:
            value = environ.get(env, default) if name not in _NO_ENV else default
            parser.add_argument(*spellings, default=value)
    parser.add_argument("training_script")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return parser


def torchrun_argv(argv: Sequence[str]) -> list[str]:
    """torchrun's own arguments in a launcher command line: after ``torchrun`` (any path),
    or after ``-m torch.distributed.run`` of a Python; anything else is refused, so a line
    the gate cannot read never passes as one node."""
    if not argv:
        raise UsageError("--torchrun needs the torchrun command line after --")
    if os.path.basename(argv[0]) == "torchrun":
        return list(argv[1:])
    for i, arg in enumerate(argv[1:], start=1):
        module = (
            argv[i + 1]
            if arg == "-m" and i + 1 < len(argv)
            else arg[2:]
            if arg.startswith("-m")
            else None
        )
        if module is not None:
            if module in RUN_MODULES:
                return list(argv[i + 2 if arg == "-m" else i + 1 :])
            break
        if not arg.startswith("-"):
            break
    raise UsageError(
        f"--torchrun: {argv[0]} ... is not a torchrun command line",
        "give torchrun ... or python -m torch.distributed.run ... after --",
    )


@dataclass(frozen=True)
class Launch:
    """What a torchrun command line says of its job: this node's rank among how many (None:
    the rendezvous assigns it, c10d and kin), and where its rendezvous is."""

    node_rank: int | None
    nnodes: int
    addr: str
    port: int


def _number(text: object, what: str) -> int:
    if not isinstance(text, str) or not text.strip().isdigit():
        raise UsageError(f"torchrun's {what} is not a number: {text!r}")
    return int(text)


def _endpoint(endpoint: str, default_port: int) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep or "]" in port:  # no port, or an IPv6 address without one
        host, port = endpoint, ""
    host = host.strip("[]") or "127.0.0.1"
    return host, _number(port, "--rdzv-endpoint port") if port else default_port


def torchrun_launch(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> Launch:
    """The job a torchrun command line (``argv``: the whole launcher line) starts."""
    args = _parser(environ).parse_args(torchrun_argv(argv))
    if args.help:
        raise UsageError("--torchrun: torchrun --help starts no job: nothing to gate")
    if args.standalone:
        return Launch(node_rank=0, nnodes=1, addr="127.0.0.1", port=29400)
    nnodes = str(args.nnodes)
    low, _, high = nnodes.partition(":")
    if high and high != low:
        raise UsageError(
            f"torchrun --nnodes {nnodes}: the environment gate needs a fixed number of nodes",
            "gate inside the training script instead (envguard.distributed.assert_homogeneous)",
        )
    count = _number(low, "--nnodes")
    if args.rdzv_backend == "static":
        if args.rdzv_endpoint:
            addr, port = _endpoint(args.rdzv_endpoint, 29500)
        else:
            addr = args.master_addr or "127.0.0.1"
            port = _number(args.master_port or "29500", "--master-port")
        return Launch(_number(str(args.node_rank), "--node-rank"), count, addr, port)
    # c10d (and etcd): the rendezvous ranks the nodes as they come; --node-rank is not used.
    if not args.rdzv_endpoint:
        raise UsageError(f"torchrun --rdzv-backend {args.rdzv_backend} needs --rdzv-endpoint")
    addr, port = _endpoint(args.rdzv_endpoint, 29400)
    return Launch(None, count, addr, port)
