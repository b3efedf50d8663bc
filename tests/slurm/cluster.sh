#!/usr/bin/env bash
# Start (or stop) a real single-node Slurm cluster on localhost for the workflow's
# SLURM test: munge + slurmctld + slurmd from Debian's packages, no accounting daemon.
#
#   tests/slurm/cluster.sh start STATE_DIR    # prints nothing on success; exits non-zero with a reason
#   tests/slurm/cluster.sh stop STATE_DIR
set -euo pipefail
action=${1:?start|stop}
state=${2:?state directory}
mkdir -p "$state"
state=$(cd "$state" && pwd)
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))

# Slurm's clients inside jobs read the default /etc/slurm/slurm.conf (Snakemake's
# jobstep executor drops SLURM_CONF with every other SLURM_* variable), so the
# test cluster's config is linked there, never over a config it did not write.
system_conf=/etc/slurm/slurm.conf
marker="# gnnflow test cluster"

stop() {
  for f in slurmd slurmctld munged; do
    [[ -f "$state/$f.pid" ]] && kill "$(cat "$state/$f.pid")" 2>/dev/null || true
  done
  if [[ -L $system_conf ]] && grep -q "^$marker" "$system_conf" 2>/dev/null; then rm -f "$system_conf"; fi
  sleep 1
}

if [[ $action == stop ]]; then stop; exit 0; fi

for exe in munged slurmctld slurmd sbatch squeue; do
  command -v "$exe" >/dev/null || { echo "cluster.sh: $exe not found (apt-get install slurmctld slurmd slurm-client munge)" >&2; exit 3; }
done
stop
# free loopback ports, so a cluster left over elsewhere cannot collide with this one
read -r ctld_port slurmd_port < <(python3 -c 'import socket
ps = []
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ps.append(s)
print(*[s.getsockname()[1] for s in ps])')
mkdir -p "$state"/{spool,ctld,log,munge,run}
# munge needs a key readable only by its user (root here) and its own socket dir
if [[ ! -f "$state/munge/munge.key" ]]; then
  dd if=/dev/urandom bs=1 count=1024 of="$state/munge/munge.key" 2>/dev/null
fi
chmod 700 "$state/munge"; chmod 400 "$state/munge/munge.key"
munged --force --key-file="$state/munge/munge.key" --socket="$state/munge/munge.socket" \
       --pid-file="$state/munged.pid" --log-file="$state/log/munged.log" --seed-file="$state/munge/seed"
if [[ -e $system_conf || -L $system_conf ]] && ! grep -q "^$marker" "$system_conf" 2>/dev/null; then
  echo "cluster.sh: $system_conf exists and is not the test cluster's; refusing to replace it" >&2
  exit 5
fi
cat >"$state/slurm.conf" <<CONF
$marker ($state)
ClusterName=gnnflowtest
SlurmctldHost=$host
AuthType=auth/munge
AuthInfo=socket=$state/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
mkdir -p "$(dirname "$system_conf")"
ln -sfn "$state/slurm.conf" "$system_conf"
export SLURM_CONF="$state/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 1 30); do
  if sinfo -h -o %T 2>/dev/null | grep -qE "idle|mixed"; then exit 0; fi
  sleep 1
done
echo "cluster.sh: the node did not become idle; see $state/log" >&2
exit 4
