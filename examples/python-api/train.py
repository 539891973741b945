"""A training script that snapshots its own environment at the end of a good run.

Run it with the venv to record as the interpreter:  python examples/python-api/train.py
It "trains", then records the environment with the run's metrics, saves the snapshot next
to the run, and hands its JSON to an experiment tracker (here a stand-in: a folder of JSON
files; with wandb it is ``run.config.update(config)`` and ``run.log_artifact(path)``).
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import envguard


def train() -> dict[str, float]:
    """Stand-in for the real loop: returns the metrics of the run."""
    # torch.compile writes the cache folder it uses into os.environ (inductor's default:
    # $TMPDIR/torchinductor_$USER), as a relaunch will again: the snapshot names it in
    # env_at_start, and a diff from a shell says it at info.
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a container's uid with no name: as torch names it
        user = f"uid_{os.getuid()}"
    default = os.path.join(tempfile.gettempdir(), "torchinductor_" + user)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", default)
    started = time.perf_counter()
    tokens = sum(range(200_000))  # "work"
    return {"tok_s": round(tokens / max(time.perf_counter() - started, 1e-6)), "loss": 1.92}


def main(run_dir: Path) -> int:
    metrics = train()
    # The interpreter running this script is the environment of the run.
    snap = envguard.snapshot(
        python=sys.executable,
        name="good-run",
        metrics=metrics,
        note="end of a good run",
    )
    path = envguard.save(snap, run_dir / "envguard-snapshot.json", force=True)

    # An experiment tracker takes a flat config dict and the file as an artifact.
    config = {
        "envguard/python": snap.interpreter.version,
        "envguard/packages": sum(not p.shadowed for p in snap.packages),
        "envguard/torch": snap.torch.version if snap.torch else None,
        "envguard/snapshot": str(path),
    }
    tracker = run_dir / "tracker"
    tracker.mkdir(parents=True, exist_ok=True)
    (tracker / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    (tracker / "artifact-envguard-snapshot.json").write_text(snap.model_dump_json(indent=2))

    # Before the next launch: nothing drifted since this run?
    drift = envguard.diff(path, python=sys.executable)
    print(f"recorded {path}; drift since: {len(drift.changes)} changes")
    return 0 if not drift.reaches(envguard.Severity.warning) else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs/latest")))
