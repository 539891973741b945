#!/usr/bin/env bash
# Slurm as the engine, inside one allocation, with nothing installed on the nodes: the probe
# goes to every node of the job on srun's stdin, one step per node, and each node prints one
# JSON line; srun's own lines say which node failed and how. No new job: steps of the
# allocation (--overlap shares its CPUs with the steps already running, e.g. the training).
# Usage: examples/fleet/slurm-fanout.sh JOBID [PYTHON]   (PYTHON: the venv's, on the nodes)
# ENVGUARD_NODE_TIMEOUT: seconds one node's step may take (default 120);
# ENVGUARD_FANOUT: steps at once (default 32).
# Tested with stand-ins for scontrol and srun on three nodes and on a real two-node Slurm
# 22.05 allocation (tests/compare/test_fanout.py).
set -uo pipefail
job="$1"; python="${2:-python3}"; out="snapshots/fanout-$job-$(date -u +%Y%m%d-%H%M%S)"
limit="${ENVGUARD_NODE_TIMEOUT:-120}"; width="${ENVGUARD_FANOUT:-32}"
mkdir -p "$out/steps"
envguard probe-payload > "$out/p.py"
# Every node of the allocation, from the job's own node list: one srun without -N starts
# one task, on one node, and the others would go unchecked.
nodelist=$(scontrol show job -o "$job" | tr ' ' '\n' | sed -n 's/^NodeList=//p')
if [ -z "$nodelist" ] || [ "$nodelist" = "(null)" ]; then
  echo "error: job $job: no nodes allocated (pending, finished, or not a job id?)" >&2
  exit 2
fi
scontrol show hostnames "$nodelist" > "$out/hosts.txt" || exit 2

step() {  # one node: its own step, bounded; its output and srun's lines kept apart
  timeout -k 10 "$limit" srun --jobid="$job" --overlap -N1 -n1 -w "$1" --kill-on-bad-exit=0 \
    --input=all "$python" -I -S - < "$out/p.py" > "$out/steps/$1.out" 2> "$out/steps/$1.err"
  if [ $? -eq 124 ]; then echo "envguard: $1: no answer within $limit s" >> "$out/steps/$1.err"; fi
}

# A node that fails does not stop the others (fleet reports it as a row).
running=0
while read -r node; do
  step "$node" &
  running=$((running + 1))
  if [ "$running" -ge "$width" ]; then wait -n; running=$((running - 1)); fi
done < "$out/hosts.txt"
wait
while read -r node; do
  awk -v node="$node" '{ print node ": " $0 }' "$out/steps/$node.out"
done < "$out/hosts.txt" > "$out/nodes.txt"
cat "$out"/steps/*.err > "$out/srun.txt" 2> /dev/null
envguard fleet "$out/nodes.txt" "$out/srun.txt" --hosts "$(paste -sd, "$out/hosts.txt")" \
  ${ENVGUARD_BASELINE:+--baseline "$ENVGUARD_BASELINE"}
