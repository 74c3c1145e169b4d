#!/usr/bin/env bash
# Starts a single-node Slurm cluster on this machine for the sweep test: installs Debian's
# slurm-wlm and munge if absent, writes a config into $ROPELAB_SLURM_DIR (default
# /tmp/ropelab-slurm), starts munged, slurmctld and slurmd, and waits until the node is idle.
# Prints the `export SLURM_CONF=...` line the clients need. Stop it with ci/slurm/stop.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${ROPELAB_SLURM_DIR:-/tmp/ropelab-slurm}"

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  # Package output goes to standard error: standard output is the export line alone.
  if [ "$(id -u)" = 0 ]; then
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm munge >&2
  else
    sudo apt-get update >&2
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm munge >&2
  fi
fi

mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
host="$(hostname -s)"
cpus="$(nproc)"
sed -e "s|@HOST@|$host|g" -e "s|@DIR@|$dir|g" -e "s|@CPUS@|$cpus|g" \
  "$here/slurm.conf.in" > "$dir/slurm.conf"
export SLURM_CONF="$dir/slurm.conf"

# munge: its own key and socket under $dir, so nothing of the machine's is touched.
if [ ! -f "$dir/munge/munge.key" ]; then
  dd if=/dev/urandom bs=1 count=1024 of="$dir/munge/munge.key" 2>/dev/null
fi
chmod 700 "$dir/munge"
chmod 400 "$dir/munge/munge.key"
socket="$dir/munge/munge.socket"
munged --force --key-file="$dir/munge/munge.key" --socket="$socket" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
  --seed-file="$dir/munge/munged.seed"
# Slurm's auth plugin finds the socket through its config.
echo "AuthInfo=socket=$socket" >> "$dir/slurm.conf"

slurmctld -f "$dir/slurm.conf" >&2
slurmd -f "$dir/slurm.conf" >&2

for _ in $(seq 1 60); do
  if sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix)'; then
    echo "export SLURM_CONF=$dir/slurm.conf"
    exit 0
  fi
  sleep 1
done
echo "the Slurm node did not become idle within 60 s; logs in $dir" >&2
tail -n 20 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
exit 1
