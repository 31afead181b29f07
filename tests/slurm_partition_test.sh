#!/bin/bash
# slurm_partition_test.sh: issue #8's network partition in the Slurm test cluster
# (tests/slurm/cluster.sh, 3 nodes in network namespaces). A `--jobfs=replicas=2` job on n1..n3
# writes files from n1 and n2 through their FUSE mounts; meanwhile the test brings n3's veth
# down (in this, the host's, namespace: n3 is cut off from the bridge) for 8 s, more than the
# daemons' failure timeout, then heals it. Asserts: every write from n1 and n2 completes
# (no error, the writers go on through the partition); every acknowledged file reads back
# byte-exact on n1; after healing, n3's daemon resyncs (`jobfs status` with the job's
# JOBFS_CLUSTER shows all three serving again) and serves: n3's mount reads every file
# byte-exact, and `jobfs scrub` finds every copy of every chunk equal; the job ends cleanly
# and leaves nothing on any node. The files are in the root
# directory, whose metadata shard is n1's (its copy on n2 is not needed: n1 stays).
# Needs root, slurmctld/slurmd/munged and /dev/fuse (skipped otherwise).
set -u
# The nodes talk over the test bridge: not make check's loopback-only UCX setting (tests/local.mk).
unset UCX_NET_DEVICES
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
srcdir=$(abs "${srcdir:-.}")
CLUSTER=$srcdir/tests/slurm/cluster.sh
cluster() { "$CLUSTER" "$@" 9>&-; }
PLUGIN=$(abs "${SPANK_PLUGIN:-./spank-plugin/.libs/spank_jobfs.so}")
JOBFSD=$(abs "${JOBFSD:-./server/jobfsd}")
JOBFS_FUSE=$(abs "${JOBFS_FUSE:-./client/jobfs-fuse}")
JOBFS=$(abs "${JOBFS:-./client/jobfs}")
export JOBFS_SLURM_DIR=${JOBFS_SLURM_DIR:-/var/tmp/jobfs-slurm-partition}
D=$JOBFS_SLURM_DIR
UA=jobfs-test-a
if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/fuse ] || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  echo "ok - # SKIP the Slurm tests need root, /dev/fuse, slurmctld, slurmd and munged (scripts/install-deps)"
  exit 0
fi
# One test cluster at a time on this machine (see slurm_test.sh); its daemons do not inherit
# the lock.
exec 9> /run/lock/jobfs-slurm-test.lock
flock -w 900 9 || { echo "not ok - another Slurm test held the test cluster for 15 minutes"; exit 1; }
fails=0
check() { # NAME CMD...: runs CMD (a program or a function of this file), counts a failure
  name=$1; shift
  if "$@"; then echo "ok - $name"; else echo "not ok - $name"; fails=$((fails + 1)); fi
}
cleanup() {
  [ -n "${veth:-}" ] && ip link set "$veth" up 2>/dev/null
  cluster stop >/dev/null 2>&1
  rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

mkdir -p "$D/inst" "$D/out"
chmod 755 "$D" "$D/inst"
chmod 1777 "$D/out"
cp "$PLUGIN" "$JOBFSD" "$JOBFS_FUSE" "$JOBFS" "$D/inst/" || exit 1
OUT=$D/out
id "$UA" >/dev/null 2>&1 || useradd -M -d /nonexistent -s /bin/bash "$UA" || exit 1
export JOBFS_SLURM_PLUGSTACK="required $D/inst/spank_jobfs.so storage_dir=/tmp/jobfs-data mount_root=/tmp/jobfs-mnt state_dir=/tmp/jobfs-state key_file=$D/munge/munge.key jobfsd=$D/inst/jobfsd jobfs_fuse=$D/inst/jobfs-fuse jobfs=$D/inst/jobfs ucx_tls=tcp startup_timeout=15"
export SLURM_CONF=$D/etc/slurm.conf
export UCX_TLS=tcp

as() { # USER CMD...: CMD as USER, from the shared output directory
  local u=$1; shift
  (cd "$OUT" && runuser -u "$u" -- env SLURM_CONF="$SLURM_CONF" UCX_TLS=tcp PATH=/usr/bin:/bin "$@")
}
slurmd_pid() { cat "$D/run/slurmd-n$1.pid"; }
wait_for() { # SECONDS CMD...: until CMD succeeds
  local n=$(($1 * 10)); shift
  while [ "$n" -gt 0 ]; do "$@" && return 0; sleep 0.1; n=$((n - 1)); done
  return 1
}
clean() { # JOBID: Slurm forgot the job; no mount, daemon, data or state of it on any node
  local id=$1 k bad=0
  wait_for 150 sh -c "[ -z \"\$(squeue -h -j $id -o %i 2>/dev/null)\" ]" || { echo "# job $id still there"; return 1; }
  for k in 1 2 3; do
    if grep -q " /tmp/jobfs-mnt/$id " "/proc/$(slurmd_pid $k)/mounts"; then echo "# n$k: mount of job $id left"; bad=1; fi
    if [ -e "$D/tmp/n$k/jobfs-data/job-$id" ]; then echo "# n$k: data of job $id left"; bad=1; fi
    if [ -e "$D/tmp/n$k/jobfs-state/$id" ]; then echo "# n$k: state of job $id left"; bad=1; fi
  done
  if pgrep -f "/tmp/jobfs-(data/job-|mnt/|state/)$id( |/|\$)" >/dev/null; then
    echo "# processes of job $id left:"; pgrep -af "/tmp/jobfs-(data/job-|mnt/|state/)$id( |/|\$)" | sed 's/^/# /'; bad=1
  fi
  return $bad
}
has() { grep -q -- "$2" "$1" || { echo "# '$2' not in $1:"; sed 's/^/#   /' "$1"; return 1; }; }

check "cluster of 3 nodes up" cluster start 3
[ "$fails" -eq 0 ] || exit 1
veth=$(cluster veth 3)
check "cluster.sh veth 3 names n3's veth ($veth)" sh -c "ip link show '$veth' > /dev/null"

# The job: n1 and n2 each write 4 MiB files through their mounts, one after another, until the
# test says the partition is healed and 5 more are written (at most 150 files); a file's
# checksum is recorded once cp and its close succeeded (acknowledged). Then n1 reads them all,
# waits for every daemon to serve again, and n3 reads them all.
cat > "$OUT/part.sh" <<EOS
#!/bin/bash
#SBATCH -N3 --ntasks-per-node=1 --jobfs=replicas=2,chunk_size=1M
echo "job \$SLURM_JOB_ID"
srun -N2 -n2 -w n1,n2 bash -c '
  h=\$(hostname); src=/tmp/part-src.\$\$; after=0; during=0
  for i in \$(seq 150); do
    head -c 4194304 /dev/urandom > \$src
    sum=\$(sha256sum < \$src | cut -d" " -f1)
    p=0; [ -e partitioned-\$SLURM_JOB_ID ] && [ ! -e healed-\$SLURM_JOB_ID ] && p=1
    if cp \$src \$JOBFS_MOUNT/\$h-\$i.bin; then echo "\$sum  \$h-\$i.bin" >> acked-\$SLURM_JOB_ID.\$h; else echo "write of \$h-\$i.bin failed"; fi
    during=\$((during + p))
    [ \$i -eq 2 ] && touch writing-\$SLURM_JOB_ID.\$h
    [ -e healed-\$SLURM_JOB_ID ] && after=\$((after + 1))
    [ \$after -ge 5 ] && break
  done
  rm -f \$src; echo "\$h wrote \$i files, \$during started during the partition"'
srun -N1 -n1 -w n1 $D/inst/jobfs layout /n1-1.bin > layout.\$SLURM_JOB_ID 2>&1
srun -N1 -n1 -w n1 bash -c 'cd \$JOBFS_MOUNT && cat $OUT/acked-\$SLURM_JOB_ID.n[12] | sha256sum -c --quiet - && echo "n1 read every acknowledged file byte-exact"'
# (jobfs status exits 0 with a daemon syncing: the rows must all say serving.)
srun -N1 -n1 -w n1 bash -c 'for i in \$(seq 600); do $D/inst/jobfs status > status.\$SLURM_JOB_ID 2>&1
  [ \$(awk "\\\$1 ~ /^[0-9]+\\\$/ && \\\$3 == \\"serving\\"" status.\$SLURM_JOB_ID | wc -l) -eq 3 ] && { echo "all daemons serving"; break; }; sleep 0.1; done'
srun -N1 -n1 -w n3 bash -c 'cd \$JOBFS_MOUNT && cat $OUT/acked-\$SLURM_JOB_ID.n[12] | sha256sum -c --quiet - && echo "n3 read every acknowledged file byte-exact"'
# Reads may have gone to the good copy of a chunk: scrub compares every copy.
srun -N1 -n1 -w n1 $D/inst/jobfs scrub / > scrub.\$SLURM_JOB_ID 2>&1
EOS
as $UA sbatch --parsable --wait -t 3 -o "$OUT/part-%j.out" "$OUT/part.sh" > "$OUT/sbatch" 2>&1 &
sbatch_pid=$!
wait_for 30 grep -q '^[0-9]' "$OUT/sbatch"
job=$(grep -m1 '^[0-9]' "$OUT/sbatch")
check "the job's writers started on n1 and n2" wait_for 60 sh -c "[ -e '$OUT/writing-$job.n1' ] && [ -e '$OUT/writing-$job.n2' ]"
# reach: n1 opens a TCP connection to n3's slurmd within a second.
reach() { cluster node 1 timeout 1 bash -c "exec 3<>/dev/tcp/10.78.0.13/$((${JOBFS_SLURM_PORT:-6927} + 1))" 2>/dev/null; }
touch "$OUT/partitioned-$job"
ip link set "$veth" down
unreachable() { ! reach; }
check "n3 cut off: n1 cannot reach it" unreachable
sleep 8
ip link set "$veth" up
touch "$OUT/healed-$job"
check "healed: n1 reaches n3" wait_for 10 reach
ended() { ! kill -0 "$sbatch_pid" 2>/dev/null; }
check "the job ended (sbatch --wait returned)" wait_for 150 ended
out=$OUT/part-$job.out
check "--jobfs=replicas=2 reached jobfsd: a file written has 2 copies (jobfs layout)" has "$OUT/layout.$job" "^replicas: 2"
check "every write from n1 and n2 completed" sh -c "! grep -q 'failed' '$out' && grep -q '^n1 wrote' '$out' && grep -q '^n2 wrote' '$out'"
grep ' wrote ' "$out" | sed 's/^/# /'
check "files were written during the partition" sh -c "grep ' wrote ' '$out' | awk '{ d += \$5 } END { exit !(d >= 1) }'"
check "every acknowledged file reads back byte-exact on n1" has "$out" "^n1 read every acknowledged file byte-exact"
check "after healing, n3's daemon resynced: jobfs status shows all serving" has "$out" "^all daemons serving"
sed 's/^/# /' "$OUT/status.$job"
check "n3's mount reads every acknowledged file byte-exact" has "$out" "^n3 read every acknowledged file byte-exact"
check "jobfs scrub: every copy of every chunk agrees (0 corrupt, 0 differing, 0 repaired)" \
  has "$OUT/scrub.$job" "; 0 corrupt, 0 differing, 0 repaired, 0 not repaired, 0 unreachable"
tail -n 1 "$OUT/scrub.$job" | sed 's/^/# /'
check "nothing of the job is left on any node" clean "$job"
check "cluster stops" cluster stop
exit $((fails > 0))
