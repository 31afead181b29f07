#!/bin/sh
# pmix_test.sh: jobfsd bootstrapped over PMIx. mpirun starts three daemons (rank and size from
# PMIx, free ports exchanged with Put/Fence/Get, a data directory per rank through %r); the
# jobfs tool finds them through the cluster file rank 0 writes and copies a file in and out;
# SIGTERM to mpirun ends them all. A second group on the same directories still has the file
# and, stopped by SIGTERM to each daemon, exits 0. Refusals: no launcher (exit 1, names PMIx),
# a bad bootstrap value (exit 2). Everything on loopback; every wait is bounded.
set -u
JOBFS=${JOBFS:-./client/jobfs}
JOBFSD=${JOBFSD:-./server/jobfsd}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d /tmp/jobfs-pmix-XXXXXX)
export JOBFS_CLUSTER=$dir/cluster
. "$(dirname "$0")/lib.sh"
mpirun_pid=
# The daemons mpirun started (its children), by pid.
daemon_pids() { [ -n "$mpirun_pid" ] && pgrep -P "$mpirun_pid" -x jobfsd | tr '\n' ' '; }
gone() { # PID...: none of them runs (gone, or a zombie not reaped yet)
  for p in "$@"; do s=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null); [ -z "$s" ] || [ "$s" = Z ] || return 1; done
}
wait_gone() { # SECONDS PID...
  t=$1; shift
  i=0; while [ "$i" -lt $((t * 10)) ]; do gone "$@" && return 0; sleep 0.1; i=$((i + 1)); done
  return 1
}
cleanup() {
  if [ -n "$mpirun_pid" ]; then
    pids=$(daemon_pids)
    kill -TERM "$mpirun_pid" 2>/dev/null
    wait_gone 10 "$mpirun_pid" $pids || kill -KILL "$mpirun_pid" $pids 2>/dev/null
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Starts three daemons under mpirun in the background; output in $dir/mpirun.N.out.
start_group() { # N
  out=$dir/mpirun.$1.out
  mpirun --oversubscribe --bind-to none --mca oob_tcp_if_include lo -np 3 \
    "$JOBFSD" --bootstrap pmix --listen 127.0.0.1 --port 0 --data-dir "$dir/data/%r" \
    --secret-file "$dir/secret" --cluster-file "$dir/cluster" --startup-timeout-ms 30000 \
    > "$out" 2>&1 &
  mpirun_pid=$!
}
# Waits (60 s at most) for three ready lines, or for mpirun to give up.
wait_ready() { # N
  i=0
  while [ "$i" -lt 600 ]; do
    [ "$(grep -c '^ready ' "$dir/mpirun.$1.out")" -ge 3 ] && return 0
    kill -0 "$mpirun_pid" 2>/dev/null || break
    sleep 0.1; i=$((i + 1))
  done
  echo "# no group: mpirun output follows"; sed 's/^/# /' "$dir/mpirun.$1.out"
  return 1
}
# Waits (30 s at most) for mpirun to end; its exit status in $mpirun_rc.
wait_mpirun() {
  i=0
  while [ "$i" -lt 300 ] && kill -0 "$mpirun_pid" 2>/dev/null && ! gone "$mpirun_pid"; do sleep 0.1; i=$((i + 1)); done
  gone "$mpirun_pid" || return 1
  wait "$mpirun_pid"; mpirun_rc=$?
  return 0
}

if ! command -v mpirun >/dev/null; then
  echo "not ok - mpirun is installed (apt-get install openmpi-bin)"
  exit 1
fi

check "without a launcher, bootstrap=pmix exits 1 naming PMIx" sh -c \
  "timeout 20 '$JOBFSD' --bootstrap pmix --data-dir '$dir/lone' 2>'$dir/lone.err'; [ \$? -eq 1 ] && grep -q 'PMIx_Init' '$dir/lone.err'"
check "a bad bootstrap value exits 2" sh -c \
  "timeout 20 '$JOBFSD' --bootstrap dns --data-dir '$dir/x' 2>/dev/null; [ \$? -eq 2 ]"

echo "pmix-test-secret" > "$dir/secret"
mkdir "$dir/data"
start_group 1
check "mpirun -np 3: three daemons become ready" wait_ready 1
check "ranks 0, 1, 2 of a group of 3" sh -c \
  "[ \"\$(sed -n 's/^ready rank=\([0-9]*\) size=3 port=[1-9][0-9]*\$/\1/p' '$dir/mpirun.1.out' | sort | tr '\n' ' ')\" = '0 1 2 ' ]"
check "each rank has its own data directory (%r)" test -d "$dir/data/0" -a -d "$dir/data/1" -a -d "$dir/data/2"
check "rank 0 wrote the cluster file, mode 0600, with the secret" sh -c \
  "[ \"\$(stat -c %a '$dir/cluster')\" = 600 ] && grep -q '^version = 1\$' '$dir/cluster' && grep -q '^secret = pmix-test-secret\$' '$dir/cluster'"
check "the cluster file lists the ports the daemons announced" sh -c \
  "for p in \$(sed -n 's/^ready .* port=//p' '$dir/mpirun.1.out'); do grep -q \"127.0.0.1:\$p\" '$dir/cluster' || exit 1; done"
check "status lists three daemons" sh -c "[ \$(timeout 60 '$JOBFS' status | grep -c 127.0.0.1) -eq 3 ]"
check "mkdir -p" timeout 60 "$JOBFS" mkdir -p /p/q
head -c 3000000 /dev/urandom > "$dir/in"
check "cp in" timeout 60 "$JOBFS" cp "$dir/in" jobfs:/p/q/file
check "cp out" timeout 60 "$JOBFS" cp jobfs:/p/q/file "$dir/out"
check "same bytes" cmp "$dir/in" "$dir/out"

pids=$(daemon_pids)
check "mpirun started three jobfsd" [ "$(echo $pids | wc -w)" -eq 3 ]
kill -TERM "$mpirun_pid"
check "SIGTERM to mpirun ends it" wait_mpirun
check "no daemon left" wait_gone 10 $pids
mpirun_pid=

# The same directories again: the group finds its file; SIGTERM to each daemon is a clean end.
rm -f "$dir/out"
start_group 2
check "a second group on the same data directories becomes ready" wait_ready 2
check "it still has the file" sh -c "timeout 60 '$JOBFS' cp jobfs:/p/q/file '$dir/out' && cmp '$dir/in' '$dir/out'"
pids=$(daemon_pids)
for p in $pids; do kill -TERM "$p"; done
clean_end() {
  wait_mpirun && [ "$mpirun_rc" -eq 0 ] && return 0
  echo "# mpirun exit status ${mpirun_rc:-none}; output follows"; sed 's/^/# /' "$dir/mpirun.2.out"
  return 1
}
check "SIGTERM to each daemon: all exit 0 (so mpirun exits 0)" clean_end
check "no daemon left after the second group" wait_gone 10 $pids
check "rank 0 removed the cluster file when it stopped" test ! -e "$dir/cluster"
mpirun_pid=
echo "$fails failed"
[ "$fails" -eq 0 ]
