#!/usr/bin/env bash
# Slurm as the engine, inside one allocation, with nothing installed on the nodes: the probe
# goes to every node on srun's stdin and each node prints one JSON line; srun's own lines
# say which node failed and how. No new job: one step of the allocation (--overlap shares
# its CPUs with the steps already running, e.g. the training job).
# Usage: examples/fleet/slurm-fanout.sh JOBID [PYTHON]   (PYTHON: the venv's, on the nodes)
# Tested against Slurm 22.05 on one node (tests/compare/test_fanout.py).
set -uo pipefail
job="$1"; python="${2:-python3}"; out="snapshots/fanout-$job-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
envguard probe-payload > "$out/p.py"
# One task per node of the job; a node that fails does not stop the others (srun exits
# non-zero then, and fleet reports it as a row).
srun --jobid="$job" --overlap --ntasks-per-node=1 --kill-on-bad-exit=0 --input=all --label \
  "$python" -I -S - < "$out/p.py" > "$out/nodes.txt" 2> "$out/srun.txt"
envguard fleet "$out/nodes.txt" "$out/srun.txt" ${ENVGUARD_BASELINE:+--baseline "$ENVGUARD_BASELINE"}
