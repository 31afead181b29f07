#!/bin/bash
# slurm_test.sh: spank_jobfs.so in a real Slurm 22.05 (tests/slurm/cluster.sh: munged,
# slurmctld and three slurmd "nodes" n1..n3 in network namespaces, UCX_TLS=tcp between them),
# jobs submitted as two unprivileged test users. Asserts bytes read back on other nodes, the
# mount's owner and mode, refusals (another user's mount, descriptor and daemons), the failure
# message of a daemon that cannot start, and that every job leaves no daemon, no mount and no
# data on any node: after srun, sbatch, salloc, scancel, a time limit and (on the nodes that
# survive it) the crash of a peer node, whose leftovers the node's next jobfs prolog removes
# and whose stage-out share the survivors report as failed at once, naming it; and data staged
# in from and out to an S3 server (s3rver) with --jobfs-stage-in/out, a failed stage-in and
# failed stage-outs included (each node's kept data named in the job's output file).
# Needs root, slurmctld/slurmd/munged and /dev/fuse (skipped otherwise).
set -u
# The nodes talk over the test bridge: not make check's loopback-only UCX setting (tests/local.mk).
unset UCX_NET_DEVICES
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
srcdir=$(abs "${srcdir:-.}")
CLUSTER=$srcdir/tests/slurm/cluster.sh
PLUGIN=$(abs "${SPANK_PLUGIN:-./spank-plugin/.libs/spank_jobfs.so}")
JOBFSD=$(abs "${JOBFSD:-./server/jobfsd}")
JOBFS_FUSE=$(abs "${JOBFS_FUSE:-./client/jobfs-fuse}")
JOBFS=$(abs "${JOBFS:-./client/jobfs}")
export JOBFS_SLURM_DIR=${JOBFS_SLURM_DIR:-/var/tmp/jobfs-slurm-test}
D=$JOBFS_SLURM_DIR
UA=jobfs-test-a
UB=jobfs-test-b
if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/fuse ] || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  echo "ok - # SKIP the Slurm tests need root, /dev/fuse, slurmctld, slurmd and munged (scripts/install-deps)"
  exit 0
fi
# One test cluster at a time on this machine (its bridge, namespaces and ports are fixed):
# another Slurm test of this tree (make check -j2) waits here until this one is done.
# The daemons the cluster starts must not inherit the lock (cluster(): 9>&-).
exec 9> /run/lock/jobfs-slurm-test.lock
flock -w 900 9 || { echo "not ok - another Slurm test held the test cluster for 15 minutes"; exit 1; }
cluster() { "$CLUSTER" "$@" 9>&-; }
fails=0
check() { # NAME CMD...: runs CMD (a program or a function of this file), counts a failure
  name=$1; shift
  if "$@"; then echo "ok - $name"; else echo "not ok - $name"; fails=$((fails + 1)); fi
}
# After a failure: what the cluster logged, in this test's log and in slurm_test.artifacts/.
keep_logs() {
  [ "$fails" -gt 0 ] && [ -d "$D/log" ] || return 0
  local keep=$PWD/slurm_test.artifacts f
  rm -rf "$keep"; mkdir -p "$keep"
  cp -r "$D/log" "$keep/" 2>/dev/null
  # The daemons' and mounts' own logs of the jobs still set up on a node (a teardown that hung).
  for f in "$D"/tmp/n[123]/jobfs-state/*/*.log; do
    [ -f "$f" ] || continue
    local n=${f#"$D"/tmp/}
    cp "$f" "$keep/$(echo "$n" | tr / _)" 2>/dev/null
  done
  find "$D/out" -maxdepth 1 -type f \( -name '*.out' -o -name 'mpi-trace.*' \) -size -1M -exec cp {} "$keep/" \; 2>/dev/null
  for f in "$D"/log/*.log "$D"/tmp/n[123]/jobfs-data/*.log "$D"/tmp/n[123]/jobfs-state/*/*.log; do
    [ -f "$f" ] || continue
    echo "# --- last lines of $f"; tail -n 25 "$f" | sed 's/^/#   /'
  done
  echo "# (the cluster's logs and the jobs' outputs are kept in $keep)"
}
cleanup() {
  keep_logs
  cluster stop >/dev/null 2>&1
  [ -n "${blocker:-}" ] && kill "$blocker" 2>/dev/null
  [ -n "${S3RVER_PID:-}" ] && s3rver_stop
  rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# The programs where every user of every node reaches them (as an installation would put them).
mkdir -p "$D/inst" "$D/out"
chmod 755 "$D" "$D/inst"
chmod 1777 "$D/out"
cp "$PLUGIN" "$JOBFSD" "$JOBFS_FUSE" "$JOBFS" "$D/inst/" || exit 1
OUT=$D/out
for u in $UA $UB; do
  id "$u" >/dev/null 2>&1 || useradd -M -d /nonexistent -s /bin/bash "$u" || exit 1
done
export JOBFS_SLURM_PLUGSTACK="required $D/inst/spank_jobfs.so storage_dir=/tmp/jobfs-data mount_root=/tmp/jobfs-mnt state_dir=/tmp/jobfs-state key_file=$D/munge/munge.key jobfsd=$D/inst/jobfsd jobfs_fuse=$D/inst/jobfs-fuse jobfs=$D/inst/jobfs ucx_tls=tcp startup_timeout=15"
export SLURM_CONF=$D/etc/slurm.conf
export UCX_TLS=tcp

as() { # USER CMD...: CMD as USER, from the shared output directory, for at most 300 s: a job
  # that cannot be scheduled (a drained node) fails its checks instead of hanging the suite.
  local u=$1; shift
  (cd "$OUT" && timeout -k 10 300 runuser -u "$u" -- env SLURM_CONF="$SLURM_CONF" UCX_TLS=tcp PATH=/usr/bin:/bin "$@") ||
    { local rc=$?; [ $rc -eq 124 ] && { echo "# as $u $*: no end within 300 s; queue: $(squeue -h -o '%i %T %R' | tr '\n' ';') nodes: $(sinfo -h -N -o '%N %t %E' | tr '\n' ';')"; echo "# processes of the nodes' jobs:"; pgrep -af 'slurmstepd|jobfsd|jobfs-fuse|jobfs stage|slurm_ckpt|mpirun|orted' | sed 's/^/#   /'; } >&2; return $rc; }
}
slurmd_pid() { cat "$D/run/slurmd-n$1.pid"; }
wait_gone() { # JOBID: until Slurm has forgotten the job (its epilogs are done), at most 150 s
  local i
  for i in $(seq 1500); do
    [ -z "$(squeue -h -j "$1" -o %i 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  echo "# job $1 still there: $(squeue -h -j "$1")"
  return 1
}
wait_for() { # SECONDS CMD...: until CMD succeeds
  local n=$(($1 * 10)); shift
  while [ "$n" -gt 0 ]; do "$@" && return 0; sleep 0.1; n=$((n - 1)); done
  return 1
}
# Nothing of job ID left on its nodes (all three unless named): no mount, no jobfsd or
# jobfs-fuse, no data, no state; and none of those nodes drained or down. With kept_data=1
# (a failed stage-out) the data must be there instead.
clean() { # JOBID [K...]
  local id=$1 k bad=0 nodes="${*:2}"
  nodes=${nodes:-1 2 3}
  wait_gone "$id" || return 1
  for k in $nodes; do
    if grep -q " /tmp/jobfs-mnt/$id " "/proc/$(slurmd_pid $k)/mounts"; then echo "# n$k: mount of job $id left"; bad=1; fi
    if [ "${kept_data:-0}" = 1 ]; then
      if [ ! -d "$D/tmp/n$k/jobfs-data/job-$id" ]; then echo "# n$k: data of job $id not kept"; bad=1; fi
    elif [ -e "$D/tmp/n$k/jobfs-data/job-$id" ]; then echo "# n$k: data of job $id left"; bad=1; fi
    if [ -e "$D/tmp/n$k/jobfs-state/$id" ]; then echo "# n$k: state of job $id left"; bad=1; fi
  done
  # A node drained by a failed prolog/epilog (or a task Slurm could not kill) would leave every
  # later job pending: say so, fail, and give the node back for the cases that follow.
  local drained
  drained=$(sinfo -h -N -n "n${nodes// /,n}" -t drain,drained,draining,down -o '%N %t %E' 2>/dev/null)
  if [ -n "$drained" ]; then
    echo "# after job $id, drained or down: $drained"
    scontrol update nodename="n${nodes// /,n}" state=resume >/dev/null 2>&1
    bad=1
  fi
  if pgrep -f "/tmp/jobfs-(data/job-|mnt/|state/)$id( |/|\$)" >/dev/null; then
    echo "# processes of job $id left:"; pgrep -af "/tmp/jobfs-(data/job-|mnt/|state/)$id( |/|\$)" | sed 's/^/# /'; bad=1
  fi
  return $bad
}
has() { grep -q -- "$2" "$1" || { echo "# '$2' not in $1:"; sed 's/^/#   /' "$1"; return 1; }; }
count_is() { # FILE PATTERN N
  local n; n=$(grep -c -- "$2" "$1")
  [ "$n" -eq "$3" ] || { echo "# '$2' $n times in $1, not $3:"; sed 's/^/#   /' "$1"; return 1; }
}

check "cluster of 3 nodes up (munged, slurmctld, 3 slurmd in network namespaces)" cluster start 3
[ "$fails" -eq 0 ] || exit 1

# --- time limit: submitted first, it runs (and is killed) while the other cases run ---------
cat > "$OUT/limit.sh" <<'EOS'
#!/bin/bash
#SBATCH -N2 -t 1 --jobfs
echo "limit: mounted $JOBFS_MOUNT"
srun -N2 bash -c 'echo $(hostname) > $JOBFS_MOUNT/$(hostname); sleep 600'
EOS
limit=$(as $UA sbatch --parsable -o "$OUT/limit-%j.out" "$OUT/limit.sh")

# --- options -----------------------------------------------------------------------------
srun --help > "$OUT/help" 2>&1
sbatch --help > "$OUT/sbatch-help" 2>&1
salloc --help > "$OUT/salloc-help" 2>&1
check "srun/sbatch/salloc --help show --jobfs, --jobfs-mount, --jobfs-stage-in/out" \
  bash -c "for f in help sbatch-help salloc-help; do for o in '--jobfs=' --jobfs-mount= --jobfs-stage-in= --jobfs-stage-out=; do grep -q -- \"\$o\" $OUT/\$f || exit 1; done; done"
as $UA srun -N1 --jobfs=replicas=9 true > "$OUT/bad" 2>&1
check "a bad --jobfs setting is refused at submission with its reason" has "$OUT/bad" "jobfs: --jobfs: replicas=9: must be 1 to 3"
as $UA srun -N1 --jobfs-stage-in=/data:s3://b/x true > "$OUT/bad2" 2>&1
check "a malformed --jobfs-stage-in is refused at submission" has "$OUT/bad2" "source must be an s3://bucket/prefix URL"

# --- a job without --jobfs ------------------------------------------------------------------
as $UA srun -N3 -D "$OUT" bash -c 'echo "plain $(hostname) mount=${JOBFS_MOUNT:-none} fuse=$(grep -c " /tmp/jobfs-mnt/$SLURM_JOB_ID " /proc/mounts) state=$(ls -d /tmp/jobfs-state/$SLURM_JOB_ID 2>/dev/null | wc -l)"' > "$OUT/plain" 2>&1
check "a job without --jobfs gets no mount, no JOBFS_MOUNT, no state on its nodes" count_is "$OUT/plain" "mount=none fuse=0 state=0" 3

# --- srun -N3 --jobfs: rank 0 writes on n1, n2 and n3 read it byte-exact through their mounts ----
head -c 3145728 /dev/urandom > "$OUT/src.bin"; head -c 12345 /dev/urandom >> "$OUT/src.bin"
chmod 644 "$OUT/src.bin"
as $UA srun -N3 -n3 --ntasks-per-node=1 -D "$OUT" --jobfs bash -c '
  f=$JOBFS_MOUNT/data.bin
  [ "$SLURM_PROCID" = 0 ] && echo "job $SLURM_JOB_ID"
  [ "$SLURM_PROCID" = 0 ] && echo "jobfsd nice values: $(ps -o ni= -C jobfsd | sort -u | xargs)"
  [ "$SLURM_PROCID" = 0 ] && echo "jobfs-fuse thread nice values: $(ps -L -o ni= -C jobfs-fuse | sort -u | xargs)"
  echo "root of $(hostname): $(stat -c "%U %a" "$JOBFS_MOUNT") $(grep -c " $JOBFS_MOUNT fuse.jobfs " /proc/mounts)"
  if [ "$SLURM_PROCID" = 0 ]; then
    cp src.bin "$f.tmp" && mv "$f.tmp" "$f" && echo "rank 0 on $(hostname) wrote"
  else
    for i in $(seq 300); do [ -e "$f" ] && break; sleep 0.1; done
    cmp src.bin "$f" && echo "rank $SLURM_PROCID on $(hostname) read byte-exact"
  fi' > "$OUT/srun3" 2>&1
job=$(sed -n 's/^job //p' "$OUT/srun3")
check "srun -N3 --jobfs: every node has the mount, owned by the job user, mode 700" count_is "$OUT/srun3" "$UA 700 1" 3
check "srun -N3 --jobfs: the daemons run at nice -10 though as the job's user (the plugin sets it)" has "$OUT/srun3" "^jobfsd nice values: -10$"
check "srun -N3 --jobfs: every thread of the mounts runs at nice -10 too" has "$OUT/srun3" "^jobfs-fuse thread nice values: -10$"
check "srun -N3 --jobfs: rank 0 wrote on n1" has "$OUT/srun3" "rank 0 on n1 wrote"
check "srun -N3 --jobfs: n2 read it byte-exact" has "$OUT/srun3" "rank 1 on n2 read byte-exact"
check "srun -N3 --jobfs: n3 read it byte-exact" has "$OUT/srun3" "rank 2 on n3 read byte-exact"
check "srun -N3 --jobfs: no daemon, mount, data or state left on any node" clean "${job:-0}"
# The time-limit job ran on two of these nodes all along: their prologs asked slurmctld about it
# (jobfs_leftovers.c) and left its file system alone.
running_kept() {
  local k n=0
  [ "$(squeue -h -j "$limit" -o %T)" = RUNNING ] || { echo "# job $limit is not running: $(squeue -h -j "$limit")"; return 1; }
  for k in 1 2 3; do
    [ -e "$D/tmp/n$k/jobfs-state/$limit/info" ] && grep -q " /tmp/jobfs-mnt/$limit " "/proc/$(slurmd_pid $k)/mounts" && n=$((n + 1))
  done
  [ "$n" -eq 2 ] || { echo "# job $limit has its state and mount on $n nodes, not 2"; return 1; }
  ! grep -h "job $limit is over" "$D"/log/slurmd-n[123].log
}
check "a running job's file system stays while another --jobfs job's prologs run on its nodes" running_kept

# --- sbatch -N3: two steps share the file system ------------------------------------------------
cat > "$OUT/batch.sh" <<'EOS'
#!/bin/bash
#SBATCH -N3 --ntasks-per-node=1
#SBATCH --jobfs=chunk_size=1M
echo "batch on $(hostname): $JOBFS_MOUNT $(stat -c %U "$JOBFS_MOUNT")"
srun bash -c 'head -c 2000000 /dev/urandom > $JOBFS_MOUNT/$(hostname).bin && sha256sum < $JOBFS_MOUNT/$(hostname).bin | sed "s/ .*/ $(hostname)/" > $JOBFS_MOUNT/$(hostname).sum'
srun bash -c 'cd $JOBFS_MOUNT && for h in n1 n2 n3; do [ "$(sha256sum < $h.bin | cut -d" " -f1)" = "$(cut -d" " -f1 $h.sum)" ] && echo "$(hostname) step 2 read $h.bin"; done'
EOS
bjob=$(as $UA sbatch --parsable --wait -o "$OUT/batch-%j.out" "$OUT/batch.sh")
check "sbatch --jobfs: the batch script has the mount" has "$OUT/batch-$bjob.out" "batch on n1: /tmp/jobfs-mnt/$bjob $UA"
check "sbatch --jobfs: the second step reads every node's file of the first, on every node" \
  count_is "$OUT/batch-$bjob.out" "step 2 read n[123].bin" 9
check "sbatch --jobfs: nothing left on any node" clean "$bjob"

# --- salloc --jobfs -------------------------------------------------------------------------
as $UA salloc -N2 --jobfs bash -c 'echo "job $SLURM_JOB_ID"; srun -N2 -l bash -c "hostname > \$JOBFS_MOUNT/\$(hostname)"; srun -N1 -w n2 bash -c "cat \$JOBFS_MOUNT/n1 \$JOBFS_MOUNT/n2 | tr \"\n\" \" \"; echo"' > "$OUT/salloc" 2>&1
ajob=$(sed -n 's/^job //p' "$OUT/salloc")
check "salloc --jobfs: steps of the session share the file system" has "$OUT/salloc" "^n1 n2 $"
check "salloc --jobfs: nothing left after the session" clean "${ajob:-0}"

# --- --jobfs-mount: a directory the user owns; a system path is refused ------------------------
mkdir -p "$D/usermnt"
chown $UA "$D/usermnt"
as $UA srun -N2 -D "$OUT" --jobfs-mount="$D/usermnt" bash -c 'echo "job $SLURM_JOB_ID"; echo "$(hostname) $JOBFS_MOUNT $(grep -c " $JOBFS_MOUNT fuse.jobfs " /proc/mounts)"' > "$OUT/usermnt" 2>&1
ujob=$(sed -n 's/^job //p' "$OUT/usermnt" | head -1)
check "--jobfs-mount=DIR: mounted there on every node" count_is "$OUT/usermnt" "^n[12] $D/usermnt 1$" 2
usermnt_gone() { # the job is over, no node has the mount, the directory is still the user's
  clean "$1" || return 1
  local k
  for k in 1 2; do grep -q " $D/usermnt " "/proc/$(slurmd_pid $k)/mounts" && { echo "# n$k: $D/usermnt still mounted"; return 1; }; done
  [ "$(stat -c %U "$D/usermnt")" = $UA ]
}
check "--jobfs-mount=DIR: unmounted from every node afterwards, nothing left, the directory kept" usermnt_gone "${ujob:-0}"
as $UA srun -N1 -D "$OUT" --jobfs-mount=/etc bash -c 'echo task ran' > "$OUT/etcmnt" 2>&1
check "--jobfs-mount=/etc is refused, with the reason, and no task runs" \
  bash -c "grep -q 'jobfs: on node n1: --jobfs-mount=/etc: must be an existing directory of user $UA' $OUT/etcmnt && ! grep -q 'task ran' $OUT/etcmnt"

# --- another user: user B's job on the same nodes as user A's running job ---------------------
cat > "$OUT/hold.sh" <<'EOS'
#!/bin/bash
#SBATCH -N3 --ntasks-per-node=1 --jobfs
srun bash -c 'echo private > $JOBFS_MOUNT/$(hostname).txt'
touch "$SLURM_SUBMIT_DIR/hold-$SLURM_JOB_ID.ready"
sleep 600
EOS
hold=$(as $UA sbatch --parsable -o "$OUT/hold-%j.out" "$OUT/hold.sh")
for i in $(seq 300); do [ -e "$OUT/hold-$hold.ready" ] && break; sleep 0.1; done
port=$((7200 + hold % 800))
as $UB srun -N3 -D "$OUT" -l bash -c "
  ls /tmp/jobfs-mnt/$hold 2>&1; cat /tmp/jobfs-mnt/$hold/\$(hostname).txt 2>&1; cat /tmp/jobfs-state/$hold/cluster 2>&1
  printf 'version = 1\ndaemons = n1:$port,n2:$port,n3:$port\nsecret = %s\n' 0123456789abcdef > /tmp/forged.\$\$
  JOBFS_CLUSTER=/tmp/forged.\$\$ timeout 60 $D/inst/jobfs ls / 2>&1; echo \"forged rc=\$?\"; rm -f /tmp/forged.\$\$" > "$OUT/other" 2>&1
check "user B cannot list user A's mount" count_is "$OUT/other" "ls: cannot open directory '/tmp/jobfs-mnt/$hold': Permission denied" 3
check "user B cannot read a file in user A's mount" count_is "$OUT/other" "cat: /tmp/jobfs-mnt/$hold/n[123].txt: Permission denied" 3
check "user B cannot read user A's cluster descriptor (the job secret)" count_is "$OUT/other" "cat: /tmp/jobfs-state/$hold/cluster: Permission denied" 3
check "user B's client is refused by user A's daemons (wrong job secret)" count_is "$OUT/other" "forged rc=[1-9]" 3
check "... and says why" grep -q -i "secret" "$OUT/other"
as $UA srun --jobid="$hold" --overlap -N3 -l bash -c 'cat $JOBFS_MOUNT/$(hostname).txt' > "$OUT/owner" 2>&1
check "user A's own step still reads its files" count_is "$OUT/owner" "private" 3

# --- scancel mid-job ------------------------------------------------------------------------
as $UA scancel "$hold"
check "scancel: nothing left on any node" clean "$hold"

# --- a daemon that cannot start fails the job, and says on which node and why -----------------
# Every port spank_jobfs may give a job is taken on n2 (those still in TIME_WAIT cannot be).
# Started straight (not through the cluster function), so that $! is python itself: cluster.sh
# node execs nsenter, which execs the command.
"$CLUSTER" node 2 python3 -c "import socket, time
socks = []
for p in range(7200, 8000):
    try:
        s = socket.socket(); s.bind(('0.0.0.0', p)); s.listen(); socks.append(s)
    except OSError:
        pass
print('blocking', flush=True)
time.sleep(120)" > "$OUT/blocker" 9>&- &
blocker=$!
for i in $(seq 100); do grep -q blocking "$OUT/blocker" && break; sleep 0.1; done
as $UA salloc -N3 --jobfs bash -c 'echo "job $SLURM_JOB_ID"; srun -D / bash -c "echo task ran"; echo "srun rc=$?"' > "$OUT/fail" 2>&1
# (Left alive, it kept every port of n2 for 120 s and the next job's jobfsd there unreachable.)
kill "$blocker" 2>/dev/null; wait "$blocker" 2>/dev/null; blocker=
fjob=$(sed -n 's/^job //p' "$OUT/fail")
# (srun's exit status says nothing here: Slurm 22.05's srun exits 0 when no task could be launched.)
check "a jobfsd that cannot start fails the job's step on every node: no task ran" \
  bash -c "! grep -q 'task ran' $OUT/fail && [ \$(grep -c 'spank_jobfs.so: user_init() failed' $OUT/fail) -eq 3 ]"
check "... and the job's output names the node and the cause" has "$OUT/fail" "error: jobfs: on node n2: jobfsd did not start (exit status 1): .*listen on 0.0.0.0:7[0-9]*: Device is busy"
check "... and nothing is left on any node" clean "${fjob:-0}"

# --- srun --mpi=pmix: a collective checkpoint through ad_jobfs, read back through a mount ---------
COMPONENT=${ROMIO_COMPONENT_DIR:-$PWD/romio-adio}/mca_io_romio_jobfs.so
if [ -f "$COMPONENT" ] && command -v mpicc >/dev/null && [ -e ./client/.libs/libjobfs.so.0 ]; then
  mkdir -p "$D/inst/ompi"
  cp "$COMPONENT" "$D/inst/ompi/" && cp -L ./client/.libs/libjobfs.so.0 "$D/inst/"
  mpicc -O2 -o "$OUT/slurm_ckpt" "$srcdir/tests/helpers/slurm_ckpt.c"
  sysdir=$(ompi_info --path pkglibdir | sed 's/^.*: *//')
  cat > "$OUT/mpi.sh" <<EOS
#!/bin/bash
#SBATCH -N3 --ntasks-per-node=1 --jobfs=chunk_size=256k
echo "job \$SLURM_JOB_ID"
export OMPI_MCA_mca_base_component_path=$D/inst/ompi:$sysdir LD_LIBRARY_PATH=$D/inst
export UCX_TLS=tcp OMPI_MCA_btl=self,tcp OMPI_MCA_pml=ob1 JOBFS_ROMIO_TRACE=1
srun --mpi=pmix --kill-on-bad-exit=1 ./slurm_ckpt jobfs:/ckpt 2> mpi-trace.\$SLURM_JOB_ID
srun -N1 -n1 -w n3 python3 -c "
import os
d = open(os.environ['JOBFS_MOUNT'] + '/ckpt', 'rb').read()
ok = len(d) == 3 << 20 and all(d[r << 20:(r + 1) << 20] == bytes((r * 7 + i) % 251 for i in range(1 << 20)) for r in range(3))
print('n3 read the checkpoint through its mount:', 'byte-exact' if ok else 'WRONG', len(d))"
EOS
  mjob=$(as $UA sbatch --parsable --wait -o "$OUT/mpi-%j.out" "$OUT/mpi.sh")
  check "srun --mpi=pmix --jobfs: 3 ranks on 3 nodes wrote a collective checkpoint" count_is "$OUT/mpi-$mjob.out" "rank [012] of 3 wrote its block" 3
  check "... through ad_jobfs (jobfs: name, driver trace)" grep -q '^\[ad_jobfs [0-9]*\] open /ckpt' "$OUT/mpi-trace.$mjob"
  check "... and n3 read it back byte-exact through the FUSE mount" has "$OUT/mpi-$mjob.out" "n3 read the checkpoint through its mount: byte-exact 3145728"
  check "... and nothing is left on any node" clean "${mjob:-0}"
else
  echo "ok - # SKIP srun --mpi=pmix --jobfs through ad_jobfs: the ROMIO driver is not built in this tree (configure without --disable-romio-driver)"
fi

# --- staging: --jobfs-stage-in / --jobfs-stage-out against s3rver (SigV4) on the bridge ------
# The server listens on the bridge's address, which every node's namespace reaches.
. "$srcdir/tests/helpers/s3rver.sh"
s3curl() { curl -sf --aws-sigv4 aws:amz:us-east-1:s3 --user S3RVER:S3RVER -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"; }
s3port=0 EP=http://10.78.0.1:0 # (set when it starts; the node-failure case below starts it again there)
if s3rver_start_free "$D/s3" 10.78.0.1; then
  s3port=$S3RVER_PORT
  EP=http://10.78.0.1:$s3port
  echo "ok - s3rver starts on 10.78.0.1:$s3port (the nodes' bridge)"
  s3curl -X PUT "$EP/inbkt" && s3curl -X PUT "$EP/outbkt" || echo "# buckets not created"
  # 40 objects under nested prefixes (one of 6 MiB), put there by jobfs stage-out from a local tree.
  python3 - "$OUT/stage-src" <<'PY'
import os, sys, random
rnd = random.Random(11)
for i in range(40):
    d = os.path.join(sys.argv[1], "set%d" % (i % 4), "sub" if i % 3 else "")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "obj %02d.bin" % i), "wb") as f:
        f.write(rnd.randbytes(6 << 20 if i == 7 else rnd.randint(1, 200000)))
PY
  chmod -R a+rX "$OUT/stage-src"
  AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_ENDPOINT_URL=$EP "$JOBFS" stage-out --progress none "$OUT/stage-src" s3://inbkt/data/ > "$OUT/stage-put" 2>&1 \
    || { echo "# objects not put:"; sed 's/^/#   /' "$OUT/stage-put"; }
  cat > "$OUT/stage.sh" <<'EOS'
#!/bin/bash
#SBATCH -N3 --ntasks-per-node=1 --jobfs
#SBATCH --jobfs-stage-in=s3://inbkt/data/:/in
#SBATCH --jobfs-stage-out=/out:s3://outbkt/run1/
cd stage-src && find . -type f | { n=0; while IFS= read -r f; do cmp -s "$f" "$JOBFS_MOUNT/in/$f" && n=$((n + 1)) || echo "differs: $f"; done; echo "stage-in: $n objects byte-exact in $JOBFS_MOUNT/in"; }
srun bash -c 'mkdir -p $JOBFS_MOUNT/out/$(hostname) && head -c $((3000000 + SLURM_NODEID * 77777)) /dev/urandom > $JOBFS_MOUNT/out/$(hostname)/result.bin'
mkdir -p "$SLURM_SUBMIT_DIR/stage-res-$SLURM_JOB_ID" && cp -r "$JOBFS_MOUNT/out/." "$SLURM_SUBMIT_DIR/stage-res-$SLURM_JOB_ID/"
EOS
  sjob=$(as $UA env AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_ENDPOINT_URL=$EP sbatch --parsable --wait -o "$OUT/stage-%j.out" "$OUT/stage.sh")
  check "sbatch -N3 --jobfs-stage-in: all 40 objects byte-exact in jobfs before the script ran" has "$OUT/stage-$sjob.out" "stage-in: 40 objects byte-exact"
  check "... and none differs" bash -c "! grep -q differs $OUT/stage-$sjob.out"
  check "... nothing left on any node after the stage-out" clean "${sjob:-0}"
  stage_out_same() { # every node's result is on the server, byte-identical (s3rver's own store)
    local h
    for h in n1 n2 n3; do
      cmp "$OUT/stage-res-$sjob/$h/result.bin" "$D/s3/outbkt/run1/$h/result.bin._S3rver_object" || return 1
    done
  }
  check "--jobfs-stage-out: the 3 nodes' results are byte-identical on the server after the job" stage_out_same
  cat > "$OUT/stage-bad.sh" <<'EOS'
#!/bin/bash
#SBATCH -N3 --ntasks-per-node=1 --jobfs
#SBATCH --jobfs-stage-in=s3://inbkt/data/:/in
touch "$SLURM_SUBMIT_DIR/stage-bad-ran.$SLURM_JOB_ID"
EOS
  bad=$(as $UA env AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=wrong AWS_ENDPOINT_URL=$EP sbatch --parsable --wait -o "$OUT/stage-bad-%j.out" "$OUT/stage-bad.sh")
  check "a stage-in with a wrong secret fails the job before its script runs" test ! -e "$OUT/stage-bad-ran.$bad"
  check "... and the job's output names the object and SignatureDoesNotMatch" has "$OUT/stage-bad-$bad.out" "jobfs: on node n1: stage-in s3://inbkt/data/ -> /in failed on node n[123]: .*s3://inbkt/data/.*SignatureDoesNotMatch"
  check "... and nothing is left on any node" clean "${bad:-0}"
  # A job that fails still stages out; a stage-out that fails keeps every node's data and says where.
  cat > "$OUT/stage-fail.sh" <<'EOS'
#!/bin/bash
#SBATCH -N2 --ntasks-per-node=1 --jobfs
#SBATCH --jobfs-stage-out=/out:s3://outbkt/failed/
#SBATCH --jobfs-stage-out=/out:s3://nobucket/x/
srun bash -c 'mkdir -p $JOBFS_MOUNT/out && echo "partial $(hostname)" > $JOBFS_MOUNT/out/$(hostname).txt && echo "node $(hostname)"'
exit 3
EOS
fjob2=$(as $UA env AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_ENDPOINT_URL=$EP sbatch --parsable --wait -o "$OUT/stage-fail-%j.out" "$OUT/stage-fail.sh")
  wait_gone "${fjob2:-0}"
  fnodes=$(sed -n 's/^node //p' "$OUT/stage-fail-$fjob2.out" | sort | tr '\n' ' ')
  staged_out() { local h; for h in $fnodes; do grep -qx "partial $h" "$D/s3/outbkt/failed/$h.txt._S3rver_object" || return 1; done; [ -n "$fnodes" ]; }
  check "a failed job (exit 3) is still staged out" staged_out
  kept() { # a failed stage-out: both nodes keep the data, a note for the user and slurmd's log say where
    local k
    for k in ${fnodes//n/}; do
      [ -d "$D/tmp/n$k/jobfs-data/job-$fjob2" ] || { echo "# n$k: data of job $fjob2 not kept"; return 1; }
      has "$D/tmp/n$k/jobfs-data/job-$fjob2.stage-out-failed" "stage-out failed, nothing was thrown away: .*nobucket.*NoSuchBucket" || return 1
      has "$D/tmp/n$k/jobfs-data/job-$fjob2.stage-out-failed" "data stays in /tmp/jobfs-data/job-$fjob2 on node n$k" || return 1
      has "$D/log/slurmd-n$k.log" "job $fjob2: stage-out failed: .*the job's data stays in /tmp/jobfs-data/job-$fjob2 on node n$k" || return 1
    done
    [ -n "$fnodes" ] && [ "$(stat -c %U "$D/tmp/n$k/jobfs-data/job-$fjob2.stage-out-failed")" = $UA ]
  }
  check "a stage-out to a missing bucket keeps the data on every node, and the note and slurmd's log say where" kept
  told_user() { # ... and the job's output file (on the shared $OUT) has each node's line
    local k
    for k in ${fnodes//n/}; do
      has "$OUT/stage-fail-$fjob2.out" "^spank_jobfs: stage-out of /out -> s3://outbkt/failed/, /out -> s3://nobucket/x/ failed: .*s3://nobucket/x/.*NoSuchBucket.*; the job's data stays at /tmp/jobfs-data/job-$fjob2 on node n$k for a retry: " || return 1
    done
    [ -n "$fnodes" ]
  }
  check "... and the job's output file says so, naming the object, the error and each node's kept path" told_user
  rm -rf "$D"/tmp/n[123]/jobfs-data/job-"$fjob2"*
  check "... nothing else of the job is left" clean "${fjob2:-0}"
  s3rver_stop
else
  echo "not ok - s3rver starts on 10.78.0.1"; fails=$((fails + 1))
fi

# --- node failure of a peer: n2 crashes mid-job; n1's and n3's epilogs still leave nothing -----
# The crash: n2's link goes silent (a dead node answers nothing, not even a reset) and every
# process in n2 (slurmd, the job's slurmstepd and tasks, jobfsd, jobfs-fuse) gets SIGKILL. The
# test then marks n2 down, as SlurmdTimeout (60 s) would, and Slurm ends the job with NODE_FAIL:
# n1 and n3 run their epilogs with their peer gone, while their tasks were writing and reading
# files whose chunks are on every node.
# The job also stages /out out: n2's share is never copied and n2 never marks it, so n1's and
# n3's epilogs must not wait for that mark (for stage_timeout, a day) but ask slurmctld, find n2
# down, fail the stage-out naming n2 and keep their data. (replicas=2: the survivors' own
# shares and marks then do not need n2's chunks, and n2's missing share is the one failure.)
wait_gone "$limit" >/dev/null # (the time-limit job must not be on n2 when it dies)
s3rver_start "$D/s3" "$s3port" 10.78.0.1 && s3curl -X PUT "$EP/crashbkt" ||
  { echo "not ok - s3rver starts again for the node failure case"; fails=$((fails + 1)); }
# (--no-requeue: a batch job is requeued after a node failure by default; this one ends.)
cat > "$OUT/crash.sh" <<'EOS'
#!/bin/bash
#SBATCH -N3 --ntasks-per-node=1 --jobfs=replicas=2 --no-requeue
#SBATCH --jobfs-stage-out=/out/:s3://crashbkt/crash/
srun bash -c 'h=$(hostname); i=0; mkdir -p $JOBFS_MOUNT/out; for f in a b c d; do echo "$h $f" > $JOBFS_MOUNT/out/$h.$f; done
  while :; do i=$((i + 1)); head -c 4000000 /dev/urandom > $JOBFS_MOUNT/$h.$((i % 4)); cat $JOBFS_MOUNT/n*.[0-3] > /dev/null
    [ $i -eq 3 ] && touch $SLURM_SUBMIT_DIR/crash-$SLURM_JOB_ID.$h; done'
EOS
cjob=$(as $UA env AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_ENDPOINT_URL=$EP sbatch --parsable -o "$OUT/crash-%j.%N.out" "$OUT/crash.sh")
crash_wrote() { local h; for h in n1 n2 n3; do [ -e "$OUT/crash-$cjob.$h" ] || return 1; done; }
check "node failure: a 3-node job writes and reads through its mount on every node" wait_for 60 crash_wrote
n2_dead() { [ -z "$(ip netns pids jobfs-n2)" ]; }
ip link set "$(cluster veth 2)" down
# (kill -9 each at once; what a SIGKILL ends is reaped by init, which may take a moment.)
ip netns pids jobfs-n2 | xargs -r kill -9
check "node failure: n2 crashed (its link down, no process left in it)" wait_for 10 n2_dead
scontrol update nodename=n2 state=down reason=crash
t0=$(date +%s)
check "node failure: Slurm ended the job (NODE_FAIL)" wait_for 5 grep -q "JobId=$cjob .*NODE_FAIL\|Killing JobId=$cjob on failed node n2" "$D/log/slurmctld.log"
clean_kept() { kept_data=1 clean "$@"; }
check "node failure: n1 and n3 tore the job down: no daemon, mount or state left, the data kept (failed stage-out), not drained" \
  clean_kept "${cjob:-0}" 1 3
t1=$(date +%s)
echo "# node failure: job $cjob gone $((t1 - t0)) s after n2 was marked down"
# (A task whose FUSE request waits for n2 ends when the client's call times out (30 s); then
# the stage-out (n2's mark: slurmctld is asked every 5 s), 5 s of grace, and the epilog stops
# jobfs-fuse (5 s) and jobfsd (10 s). A step that outlasts UnkillableStepTimeout (60 s) drains
# its node, which clean() reports. Without the question to slurmctld the epilogs would wait
# for n2's mark until stage_timeout, a day.)
check "node failure: the survivors' teardown ended within 90 s" test $((t1 - t0)) -le 90
crash_stage_failed() { # n1 and n3: slurmd's log and the user's note name n2 as the cause
  local k note
  for k in 1 3; do
    note=$D/tmp/n$k/jobfs-data/job-$cjob.stage-out-failed
    grep -q "job $cjob: stage-out failed: stage-out: node n2 of the job is down (its share was not copied); the job's data stays in /tmp/jobfs-data/job-$cjob on node n$k" "$D/log/slurmd-n$k.log" ||
      { echo "# n$k's slurmd.log on job $cjob:"; grep "job $cjob\|JobId=$cjob" "$D/log/slurmd-n$k.log" | tail -n 25 | sed 's/^/#   /'; return 1; }
    has "$note" "stage-out failed, nothing was thrown away: stage-out: node n2 of the job is down" || return 1
    [ "$(stat -c '%U %a' "$note")" = "$UA 600" ] || { echo "# $note: $(stat -c '%U %a' "$note")"; return 1; }
  done
}
check "node failure: n1 and n3 failed the stage-out naming n2, in slurmd's log and the user's note (mode 600)" crash_stage_failed
crash_told_user() { # ... and in the job's output file, which n1 and n3 both reach ($OUT);
  local k out # its name has the batch host (%N), which the epilog expands as slurmstepd did
  out=$(ls "$OUT"/crash-"$cjob".n[123].out 2>/dev/null)
  [ "$(echo "$out" | wc -w)" -eq 1 ] || { echo "# output files of job $cjob: ${out:-none}"; return 1; }
  for k in 1 3; do
    has "$out" "^spank_jobfs: stage-out of /out/ -> s3://crashbkt/crash/ failed: stage-out: node n2 of the job is down (its share was not copied); the job's data stays at /tmp/jobfs-data/job-$cjob on node n$k for a retry: " || return 1
  done
}
check "node failure: ... and the job's output file (-o crash-%j.%N.out) says so, with n1's and n3's kept paths" crash_told_user
# Nothing claims n2's share: no manifest of rank 1 (written only after a whole copy), and
# none of its keys (FNV-1a of the key modulo 3 is 1: n1.c, n2.c, n3.a, n3.b).
crash_not_claimed() {
  local k bad=0
  for k in .jobfs-stage-manifest.rank-1 n1.c n2.c n3.a n3.b; do
    [ -e "$D/s3/crashbkt/crash/$k._S3rver_object" ] && { echo "# s3://crashbkt/crash/$k is there"; bad=1; }
  done
  [ -d "$D/s3/crashbkt" ] && return $bad
}
check "node failure: no object claims n2's share (no manifest of rank 1, none of its keys)" crash_not_claimed
echo "# node failure: in s3://crashbkt/crash/: $(ls -A "$D/s3/crashbkt/crash" 2>/dev/null | sed 's/._S3rver_.*//' | sort -u | tr '\n' ' ')"
for k in 1 3; do # (how each survivor's epilog went, for a run that fails differently some day)
  grep "spank_jobfs: job $cjob" "$D/log/slurmd-n$k.log" | sed "s/^/# node failure: n$k: /" | tail -n 12
done
s3rver_stop
# What an administrator does with the kept data once it is dealt with (n2's own stays: its
# next prolog finds it below).
rm -rf "$D"/tmp/n[13]/jobfs-data/job-"$cjob" "$D"/tmp/n[13]/jobfs-data/job-"$cjob".stage-out-failed
# n2 comes back: its link, its slurmd (in new namespaces, with the /tmp it had), back in service.
ip link set "$(cluster veth 2)" up
n2_idle() { [ "$(sinfo -h -N -n n2 -o %t)" = idle ]; }
n2_back() {
  cluster restart-slurmd 2 || return 1
  scontrol update nodename=n2 state=resume 2>/dev/null # (ReturnToService=2 may have resumed it)
  wait_for 60 n2_idle || { sinfo -N | sed 's/^/# /'; return 1; }
}
check "node failure: n2 restarts and is back in service" n2_back
check "node failure: the crashed n2 kept the job's data and state (as a real node's disk does)" \
  test -d "$D/tmp/n2/jobfs-data/job-$cjob" -a -d "$D/tmp/n2/jobfs-state/$cjob"
# The next jobfs job on n2 finds them: slurmctld says the crashed job is over, so its prolog
# removes them (jobfs_leftovers.c) before it sets up its own.
as $UA srun -N1 -w n2 -D "$OUT" --jobfs bash -c 'echo "job $SLURM_JOB_ID"; touch $JOBFS_MOUNT/f && echo "n2 mounted again"' > "$OUT/after-crash" 2>&1
njob=$(sed -n 's/^job //p' "$OUT/after-crash")
check "node failure: the next --jobfs job on n2 runs with its file system" has "$OUT/after-crash" "n2 mounted again"
left_removed() {
  local bad=0
  if [ -e "$D/tmp/n2/jobfs-data/job-$cjob" ]; then echo "# n2: data of crashed job $cjob left"; bad=1; fi
  if [ -e "$D/tmp/n2/jobfs-state/$cjob" ]; then echo "# n2: state of crashed job $cjob left"; bad=1; fi
  if [ -e "$D/tmp/n2/jobfs-mnt/$cjob" ]; then echo "# n2: mount point of crashed job $cjob left"; bad=1; fi
  has "$D/log/slurmd-n2.log" "spank_jobfs: job $cjob is over, but its epilog did not run on this node .*: removed what it left here$" || bad=1
  return $bad
}
check "... and its prolog removed the crashed job's data, state and mount point from n2, and logged it" left_removed
check "... and nothing of that job is left on any node" clean "${njob:-0}"

# --- the time limit ---------------------------------------------------------------------------
check "time limit: the job was killed at its limit" bash -c "wait_gone() { :; }; for i in \$(seq 1500); do grep -q 'DUE TO TIME LIMIT' $OUT/limit-$limit.out 2>/dev/null && exit 0; sleep 0.1; done; cat $OUT/limit-$limit.out; exit 1"
check "time limit: it had its mount" has "$OUT/limit-$limit.out" "limit: mounted /tmp/jobfs-mnt/$limit"
check "time limit: nothing left on any node" clean "$limit"

daemons="$(cat "$D"/run/*.pid "$D/munge/munged.pid" 2>/dev/null)"
stopped() { # the daemons of the cluster (by their pid files, read before), steps, namespaces
  cluster stop || return 1
  local p s
  for p in $daemons; do
    # (gone, or a zombie: not running; its state is printed otherwise)
    s=$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) && [ -n "$s" ] && [ "$s" != Z ] && { echo "# pid $p still running ($s)"; return 1; }
  done
  ! pgrep -f '^slurmstepd:' >/dev/null && ! ip netns list | grep -q '^jobfs-n'
}
check "cluster stops and leaves nothing running" stopped
exit $((fails > 0))
