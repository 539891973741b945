#!/usr/bin/env bash
# pdsh as the engine, nothing installed on the nodes. pdsh passes no stdin to the nodes, so
# the probe is copied first (pdcp), then run; pdsh prefixes each line with the node's name
# and says "exited with exit status N" for a node that failed.
# ENVGUARD_NODE_TIMEOUT: seconds a node may take (default 120; pdsh/pdcp -u), connections
# bounded at 30 s (-t); a node past either is a row.
# Usage: examples/fleet/pdsh.sh 'gpu[01-64]' [PYTHON]
# Tested with pdsh 2.34 (-R exec stand-in nodes, tests/compare/test_fanout.py).
set -uo pipefail
nodes="$1"; python="${2:-python3}"; out="snapshots/pdsh-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
envguard probe-payload > "$out/p.py"
remote="/tmp/envguard-probe-$$.py"
bounds=(-t 30 -u "${ENVGUARD_NODE_TIMEOUT:-120}")
pdcp "${bounds[@]}" -w "$nodes" "$out/p.py" "$remote" 2> "$out/pdcp.txt"
pdsh "${bounds[@]}" -w "$nodes" "$python" -I -S "$remote" \
  > "$out/nodes.txt" 2>&1
pdsh "${bounds[@]}" -w "$nodes" rm -f "$remote" 2> /dev/null
envguard fleet "$out/nodes.txt" "$out/pdcp.txt" \
  --hosts "$(pdsh -R exec -w "$nodes" -N echo %h | paste -sd, -)"
