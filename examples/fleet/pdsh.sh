#!/usr/bin/env bash
# pdsh as the engine, nothing installed on the nodes. pdsh passes no stdin to the nodes, so
# the probe is copied first (pdcp), then run; pdsh prefixes each line with the node's name
# and says "exited with exit status N" for a node that failed.
# Usage: examples/fleet/pdsh.sh 'gpu[01-64]' [PYTHON]
# Tested with pdsh 2.34 (-R exec stand-in nodes, tests/compare/test_fanout.py).
set -uo pipefail
nodes="$1"; python="${2:-python3}"; out="snapshots/pdsh-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
envguard probe-payload > "$out/p.py"
remote="/tmp/envguard-probe-$$.py"
pdcp -w "$nodes" "$out/p.py" "$remote" 2> "$out/pdcp.txt"
pdsh -w "$nodes" "$python" -I -S "$remote" \
  > "$out/nodes.txt" 2>&1
pdsh -w "$nodes" rm -f "$remote" 2> /dev/null
envguard fleet "$out/nodes.txt" "$out/pdcp.txt" \
  --hosts "$(pdsh -R exec -w "$nodes" -N echo %h | paste -sd, -)"
