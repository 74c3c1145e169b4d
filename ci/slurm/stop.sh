#!/usr/bin/env bash
# Stops what ci/slurm/start.sh started (slurmd, slurmctld, munged), by their pid files.
dir="${ROPELAB_SLURM_DIR:-/tmp/ropelab-slurm}"
for pid in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
  if [ -f "$pid" ]; then
    kill "$(cat "$pid")" 2>/dev/null || true
  fi
done
sleep 1
rm -rf "$dir"
