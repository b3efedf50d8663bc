#!/usr/bin/env bash
# A real Slurm cluster for the workflow's SLURM tests: munge + slurmctld + slurmd
# from Debian's packages, no accounting daemon.
#
#   tests/slurm/cluster.sh start STATE_DIR                  # one node on localhost, daemons started here
#   tests/slurm/cluster.sh conf STATE_DIR NAME=ADDR...       # nodes NAME at ADDR (the first holds slurmctld):
#                                                            # munge, slurm.conf and its link; the caller starts
#       slurmctld -D -f STATE_DIR/slurm.conf                 #   on the first node, and
#       slurmd -D -f STATE_DIR/slurm.conf -N NAME            #   on each node (Slurm's multiple-slurmd names)
#   tests/slurm/cluster.sh wait STATE_DIR N                  # until N nodes are idle (where slurmctld is reachable)
#   tests/slurm/cluster.sh stop STATE_DIR
#
# Every command prints nothing on success and exits non-zero with a one-line reason.
set -euo pipefail
action=${1:?start|conf|wait|stop}
state=${2:?state directory}
shift 2
mkdir -p "$state"
state=$(cd "$state" && pwd)
conf=$state/slurm.conf
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))

# Slurm's clients inside jobs read the default /etc/slurm/slurm.conf (Snakemake's
# jobstep executor drops SLURM_CONF with every other SLURM_* variable), so the
# test cluster's config is linked there, never over a config it did not write.
system_conf=/etc/slurm/slurm.conf
marker="# gnnflow test cluster"

die() { echo "cluster.sh: $*" >&2; exit "${code:-1}"; }

stop() {
  local f
  for f in "$state"/slurmd*.pid "$state"/slurmctld.pid "$state"/munged.pid; do
    [[ -f $f ]] && kill "$(cat "$f")" 2>/dev/null || true
  done
  if [[ -L $system_conf ]] && grep -q "^$marker" "$system_conf" 2>/dev/null; then rm -f "$system_conf"; fi
  sleep 1
}

check_tools() {
  local exe
  for exe in munged slurmctld slurmd sbatch squeue; do
    command -v "$exe" >/dev/null || code=3 die "$exe not found (apt-get install slurmctld slurmd slurm-client munge)"
  done
}

start_munge() {
  mkdir -p "$state"/{spool,ctld,log,munge}
  # munge needs a key readable only by its user (root here); its socket is a file, so
  # daemons in other network namespaces of this machine reach it too
  if [[ ! -f "$state/munge/munge.key" ]]; then
    dd if=/dev/urandom bs=1 count=1024 of="$state/munge/munge.key" 2>/dev/null
  fi
  chmod 700 "$state/munge"; chmod 400 "$state/munge/munge.key"
  munged --force --key-file="$state/munge/munge.key" --socket="$state/munge/munge.socket" \
         --pid-file="$state/munged.pid" --log-file="$state/log/munged.log" --seed-file="$state/munge/seed"
}

# free loopback ports, so a cluster left over elsewhere cannot collide with this one
free_ports() {
  python3 -c 'import socket
ps = []
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ps.append(s)
print(*[s.getsockname()[1] for s in ps])'
}

# write_conf NAME=ADDR...: every node has this machine's CPUs (the nodes share them), so a job of
# more one-CPU tasks than that spans nodes; %n names each slurmd's files after its node
write_conf() {
  local ctld_port slurmd_port first=${1%%=*} first_addr=${1#*=} names=() spec
  read -r ctld_port slurmd_port < <(free_ports)
  if [[ -e $system_conf || -L $system_conf ]] && ! grep -q "^$marker" "$system_conf" 2>/dev/null; then
    code=5 die "$system_conf exists and is not the test cluster's; refusing to replace it"
  fi
  cat >"$conf" <<CONF
$marker ($state)
ClusterName=gnnflowtest
SlurmctldHost=$first($first_addr)
AuthType=auth/munge
AuthInfo=socket=$state/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool/%n
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd-%n.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd-%n.log
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
CONF
  for spec in "$@"; do
    [[ $spec == *=* ]] || die "node '$spec' is not NAME=ADDR"
    names+=("${spec%%=*}")
    mkdir -p "$state/spool/${spec%%=*}"
    echo "NodeName=${spec%%=*} NodeAddr=${spec#*=} CPUs=$cpus RealMemory=$mem State=UNKNOWN" >>"$conf"
  done
  local IFS=,
  echo "PartitionName=debug Nodes=${names[*]} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >>"$conf"
  mkdir -p "$(dirname "$system_conf")"
  ln -sfn "$conf" "$system_conf"
}

# wait_idle N: until N nodes are idle (or mixed)
wait_idle() {
  local n=${1:?node count} up
  for _ in $(seq 1 30); do
    up=$(SLURM_CONF=$conf sinfo -h -N -o %T 2>/dev/null | grep -cE "idle|mixed" || true)
    [[ $up -ge $n ]] && return 0
    sleep 1
  done
  code=4 die "$n node(s) did not become idle; see $state/log"
}

case $action in
  stop) stop ;;
  wait) wait_idle "${1:?node count}" ;;
  conf)
    [[ $# -ge 1 ]] || die "conf needs at least one NAME=ADDR"
    check_tools; stop; start_munge; write_conf "$@"
    # daemons started by `ip netns exec` see a fresh /sys without /sys/fs/cgroup, where slurmd
    # would detect the cgroup version; v1's plugin starts without it (nothing here confines jobs
    # with cgroups: proctrack/linuxproc, task/none)
    echo "CgroupPlugin=cgroup/v1" >"$state/cgroup.conf" ;;
  start)
    check_tools; stop; start_munge
    rm -f "$state/cgroup.conf"
    host=$(hostname -s)
    write_conf "$host=$host"
    slurmctld -f "$conf"
    slurmd -f "$conf"
    wait_idle 1 ;;
  *) die "unknown action '$action' (start|conf|wait|stop)" ;;
esac
