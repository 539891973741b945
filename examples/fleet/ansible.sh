#!/usr/bin/env bash
# Ansible as the engine: an ad-hoc command prints each host's snapshot as JSON on stdout
# (--out -); the controller saves one file per host and compares them.
# Usage: examples/fleet/ansible.sh gpus     (an inventory group)
set -euo pipefail
group="$1"; out="snapshots/ansible-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
ansible "$group" -m ansible.builtin.command -a "envguard snapshot --out -" --one-line \
  | while IFS= read -r line; do
      host="${line%% | *}"; json="${line#*(stdout) }"
      printf '%b\n' "$json" > "$out/$host.json"
    done
envguard fleet "$out"
# Without envguard on the hosts: envguard snapshot --via 'ssh {host}' --hosts @hosts.txt
