#!/bin/bash
# tests/slurm/cluster.sh: a real Slurm 22.05 (munged, slurmctld, slurmd) on this machine, for
# the SPANK plugin's tests and bench/run slurm. Root only.
#
#   cluster.sh start [N]   N nodes n1..nN, each a slurmd in its own network namespace (own IP
#                          10.78.0.1K on bridge jobfs-br0, own hostname, own mount namespace,
#                          private /tmp); N=0: single-node mode (one slurmd in this namespace)
#   cluster.sh stop        cancel every job, stop the daemons, remove namespaces and the bridge
#   cluster.sh env         the shell lines (SLURM_CONF=...) that point srun/sbatch at it
#   cluster.sh node K CMD  run CMD inside node nK's namespaces (as its slurmd sees the world)
#   cluster.sh veth K      the name of node nK's veth in this namespace (its end on the bridge:
#                          `ip link set NAME down` cuts nK off, as a network partition)
#   cluster.sh restart-slurmd K
#                          start nK's slurmd again after it died (a crashed node coming back),
#                          in fresh namespaces as start does: nK's /tmp keeps what it held
#
# Everything lives under $JOBFS_SLURM_DIR (default /var/tmp/jobfs-slurm; not under /tmp,
# which every node replaces by its own). Ports are not Slurm's defaults (6817/6818), so a
# site's Slurm on the same machine is not disturbed: $JOBFS_SLURM_PORT (slurmctld) and +1
# (slurmd). Extra slurm.conf lines: $JOBFS_SLURM_EXTRA_CONF; plugstack.conf lines:
# $JOBFS_SLURM_PLUGSTACK (written to plugstack.conf as they are).
#
# Why nsenter and not `ip netns exec`: the latter remounts /sys in the node, which hides the
# cgroup mounts and slurmd refuses to start. Deleting a namespace is asynchronous, so stop
# deletes the veth pairs itself and start retries creating them.
set -u
DIR=${JOBFS_SLURM_DIR:-/var/tmp/jobfs-slurm}
PORT=${JOBFS_SLURM_PORT:-6927}
BR=jobfs-br0
NET=10.78.0
CTL_HOST=$(hostname -s)

die() { echo "cluster.sh: $*" >&2; exit 1; }

nodes_file() { cat "$DIR/nodes" 2>/dev/null || echo 0; }

munge_start() {
  # The key is root's; the socket must be reachable by every user who submits jobs.
  mkdir -p "$DIR/munge" "$DIR/munge-socket"
  chmod 700 "$DIR/munge"
  chmod 755 "$DIR/munge-socket"
  [ -f "$DIR/munge/munge.key" ] || mungekey --create --keyfile="$DIR/munge/munge.key" --force >/dev/null 2>&1 \
    || dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 2>/dev/null
  chmod 600 "$DIR/munge/munge.key"
  munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge-socket/munge.socket" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
    --seed-file="$DIR/munge/munged.seed" || die "munged did not start ($DIR/munge/munged.log)"
}

write_conf() { # N
  local n=$1 nodes k
  mkdir -p "$DIR/etc" "$DIR/state" "$DIR/log" "$DIR/run" "$DIR/spool" "$DIR/tmp"
  {
    echo "ClusterName=jobfstest"
    if [ "$n" -eq 0 ]; then echo "SlurmctldHost=$CTL_HOST(127.0.0.1)"; else echo "SlurmctldHost=$CTL_HOST($NET.1)"; fi
    echo "SlurmctldPort=$PORT"
    echo "SlurmdPort=$((PORT + 1))"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$DIR/munge-socket/munge.socket"
    echo "CredType=cred/munge"
    echo "StateSaveLocation=$DIR/state"
    echo "SlurmdSpoolDir=$DIR/spool/%n"
    echo "SlurmctldPidFile=$DIR/run/slurmctld.pid"
    echo "SlurmdPidFile=$DIR/run/slurmd-%n.pid"
    echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
    echo "SlurmdLogFile=$DIR/log/slurmd-%n.log"
    echo "SlurmdDebug=info"
    echo "SlurmctldDebug=info"
    echo "PlugStackConfig=$DIR/etc/plugstack.conf"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "SchedulerType=sched/builtin"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    # The job prolog runs on every node when the job is allocated, before the batch script
    # (spank_jobfs starts the file system there).
    echo "PrologFlags=Alloc"
    echo "SlurmdParameters=config_overrides"
    echo "KillWait=5"
    echo "MinJobAge=2"
    echo "InactiveLimit=0"
    echo "MessageTimeout=20"
    echo "SlurmdTimeout=60"
    if [ "$n" -eq 0 ]; then
      echo "NodeName=n1 NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=4 RealMemory=2000 State=UNKNOWN"
      nodes=n1
    else
      for k in $(seq 1 "$n"); do
        echo "NodeName=n$k NodeAddr=$NET.$((10 + k)) CPUs=4 RealMemory=2000 State=UNKNOWN"
      done
      nodes="n[1-$n]"
    fi
    echo "PartitionName=test Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
    [ -n "${JOBFS_SLURM_EXTRA_CONF:-}" ] && printf '%b\n' "$JOBFS_SLURM_EXTRA_CONF"
  } > "$DIR/etc/slurm.conf"
  printf '%s\n' "${JOBFS_SLURM_PLUGSTACK:-}" > "$DIR/etc/plugstack.conf"
  # srun --mpi=pmix: the step daemons exchange PMIx data through Slurm's own messages, not
  # direct connections, whose MUNGE check of the job user's credential failed now and then
  # under load ("Munge decode failed: Unauthorized credential for client UID=1001", then a
  # fence that never completed: MPI_Init hung until the test's limit).
  echo "PMIxDirectConn=false" > "$DIR/etc/mpi.conf"
  echo "$n" > "$DIR/nodes"
}

net_up() { # N
  local n=$1 k
  ip link show "$BR" >/dev/null 2>&1 || ip link add "$BR" type bridge || die "cannot create bridge $BR"
  ip addr replace "$NET.1/24" dev "$BR"
  ip link set "$BR" up
  for k in $(seq 1 "$n"); do
    local ns=jobfs-n$k
    ip netns add "$ns" 2>/dev/null
    local try
    for try in 1 2 3 4 5 6 7 8 9 10; do
      ip link add "jobfs-v$k" type veth peer name eth0 netns "$ns" 2>/dev/null && break
      ip link del "jobfs-v$k" 2>/dev/null
      sleep 0.3
    done
    ip link set "jobfs-v$k" master "$BR" up || die "cannot attach veth of n$k"
    ip -n "$ns" addr replace "$NET.$((10 + k))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    mkdir -p "$DIR/tmp/n$k" "$DIR/etc/n$k"
    chmod 1777 "$DIR/tmp/n$k"
    { echo "127.0.0.1 localhost"; echo "$NET.1 $CTL_HOST"
      local j; for j in $(seq 1 "$n"); do echo "$NET.$((10 + j)) n$j"; done; } > "$DIR/etc/n$k/hosts"
  done
}

# Runs CMD in node K: its network, a new UTS namespace named nK, a new mount namespace with
# its own /etc/hosts and /tmp. Mounts made inside (FUSE by the job prolog) stay in the node.
node_exec() { # K CMD...
  local k=$1; shift
  nsenter --net=/run/netns/jobfs-n$k unshare --uts --mount --propagation slave \
    sh -c 'hostname "$1"; mount --bind "$2" /etc/hosts; mount --bind "$3" /tmp; shift 3; exec "$@"' \
    sh "n$k" "$DIR/etc/n$k/hosts" "$DIR/tmp/n$k" "$@"
}

wait_idle() { # N seconds
  local want=$1 i idle
  for i in $(seq 1 200); do
    idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle" {c++} END {print c + 0}')
    [ "$idle" -ge "$want" ] && return 0
    sleep 0.1
  done
  sinfo -N 2>&1 | sed 's/^/# /' >&2
  return 1
}

start() { # N
  local n=${1:-3} k
  [ "$(id -u)" -eq 0 ] || die "needs root"
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
    || die "needs slurmctld, slurmd and munge (scripts/install-deps)"
  [ -e "$DIR/run/slurmctld.pid" ] && stop
  rm -rf "$DIR/state" "$DIR/spool" "$DIR/log"
  mkdir -p "$DIR"
  write_conf "$n"
  export SLURM_CONF=$DIR/etc/slurm.conf
  munge_start
  [ "$n" -gt 0 ] && net_up "$n"
  slurmctld -i || die "slurmctld did not start ($DIR/log/slurmctld.log)"
  if [ "$n" -eq 0 ]; then
    mkdir -p "$DIR/spool/n1"
    slurmd -N n1 || die "slurmd did not start ($DIR/log/slurmd-n1.log)"
  else
    for k in $(seq 1 "$n"); do
      mkdir -p "$DIR/spool/n$k"
      node_exec "$k" slurmd -N "n$k" || die "slurmd of n$k did not start ($DIR/log/slurmd-n$k.log)"
    done
  fi
  local want=$n; [ "$n" -eq 0 ] && want=1
  wait_idle "$want" || die "nodes not idle (logs in $DIR/log)"
}

restart_slurmd() { # K
  local k=$1 pid
  export SLURM_CONF=$DIR/etc/slurm.conf
  pid=$(cat "$DIR/run/slurmd-n$k.pid" 2>/dev/null)
  [ -n "$pid" ] && [ -d "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] &&
    die "slurmd of n$k still runs (pid $pid)"
  [ -e "/run/netns/jobfs-n$k" ] || die "node n$k does not exist"
  node_exec "$k" slurmd -N "n$k" || die "slurmd of n$k did not start ($DIR/log/slurmd-n$k.log)"
}

kill_pidfile() { # FILE
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  local i
  ended() { ! kill -0 "$pid" 2>/dev/null || [ "$(awk '{print $3}' /proc/"$pid"/stat 2>/dev/null)" = Z ]; }
  for i in $(seq 1 50); do ended && break; sleep 0.1; done
  # (On a loaded machine a daemon may outlast its 5 s; stop returns only once it is gone, so
  # that nobody finds it half way out.)
  kill -9 "$pid" 2>/dev/null
  for i in $(seq 1 50); do ended && break; sleep 0.1; done
  rm -f "$1"
}

stop() {
  export SLURM_CONF=$DIR/etc/slurm.conf
  local n k pid
  n=$(nodes_file)
  if [ -e "$DIR/run/slurmctld.pid" ]; then
    scancel --full -p test >/dev/null 2>&1
    # Jobs end with their epilogs (which unmount and stop the job's daemons): wait for them.
    for k in $(seq 1 100); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  for f in "$DIR"/run/slurmd-*.pid; do [ -e "$f" ] && kill_pidfile "$f"; done
  kill_pidfile "$DIR/run/slurmctld.pid"
  # A step daemon that outlived its slurmd (it ignored SIGTERM once the job was gone).
  for pid in $(pgrep -f "^slurmstepd: \[" 2>/dev/null); do
    grep -qs "SLURM_CONF=$DIR/" /proc/"$pid"/environ && kill -9 "$pid" 2>/dev/null
  done
  kill_pidfile "$DIR/munge/munged.pid"
  for k in $(seq 1 "$n"); do
    # Whatever still runs in the node (a jobfsd whose epilog never came: the job's state was
    # gone) would outlive the cluster and meet the next one's checks.
    ip netns pids "jobfs-n$k" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip link del "jobfs-v$k" 2>/dev/null
    ip netns del "jobfs-n$k" 2>/dev/null
  done
  ip link del "$BR" 2>/dev/null
  rm -rf "$DIR/tmp" "$DIR/state" "$DIR/spool" "$DIR/run"
  return 0
}

case "${1:-}" in
  start) start "${2:-3}" ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$DIR/etc/slurm.conf" ;;
  veth) echo "jobfs-v$2" ;;
  restart-slurmd) restart_slurmd "$2" ;;
  node) shift; k=$1; shift; exec nsenter --net=/run/netns/jobfs-n$k --mount=/proc/$(cat "$DIR/run/slurmd-n$k.pid")/ns/mnt \
          --uts=/proc/$(cat "$DIR/run/slurmd-n$k.pid")/ns/uts "$@" ;;
  *) echo "usage: cluster.sh start [N] | stop | env | node K CMD... | veth K | restart-slurmd K" >&2; exit 2 ;;
esac
