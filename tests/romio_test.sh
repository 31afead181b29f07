#!/bin/sh
# romio_test.sh: MPI-IO through the ROMIO jobfs driver (mca_io_romio_jobfs.so of this tree)
# against `jobfs local up -n 3` daemons, 4 ranks under mpirun (tests/helpers/romio_mpi.c):
# a 2-D subarray checkpoint (write_all, read_all, byte-exact), write_at_all / read_at_all,
# independent contiguous and strided I/O made visible by MPI_File_sync, iwrite_at_all, exact
# sizes (also as `jobfs stat` sees them), set_size, MPI_MODE_EXCL, atomic mode and shared file
# pointers, one connection per process however many files it opens,
# MPI_File_delete; the striping hints become the file's layout (`jobfs layout`); the file is in
# jobfs and not on the local disk; a jobfs: name without $JOBFS_CLUSTER, or with its daemons
# gone, fails MPI_File_open with a message and does not hang. Every mpirun is bounded.
set -u
JOBFS=${JOBFS:-./client/jobfs}
export JOBFSD=${JOBFSD:-./server/jobfsd}
MPIPROG=$(cd "$(dirname "${ROMIO_MPI:-./tests/helpers/romio_mpi}")" && pwd)/$(basename "${ROMIO_MPI:-romio_mpi}")
COMPONENT_DIR=${ROMIO_COMPONENT_DIR:-$(pwd)/romio-adio}
dir=$(mktemp -d /tmp/jobfs-romio-XXXXXX)
rm -rf "$dir"
tmp=$(mktemp -d /tmp/jobfs-romio-files-XXXXXX)
. "$(dirname "$0")/lib.sh"
cleanup() { "$JOBFS" local down --dir "$dir" >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 1' INT TERM

mpi_env "$COMPONENT_DIR"

# mpi CASE FILE [NP]: runs the case under mpirun (at most 120 s), its output in $tmp/CASE.out
# and .err; the case's own "ok -" lines are passed on.
mpi() {
  timeout -k 10 120 mpirun --allow-run-as-root --oversubscribe -np "${3:-4}" "$MPIPROG" "$1" "$2" \
    > "$tmp/$1.out" 2> "$tmp/$1.err"
  rc=$?
  cat "$tmp/$1.out"
  [ "$rc" -eq 0 ] || { echo "# mpirun $1 exited $rc; stderr follows"; sed 's/^/# /' "$tmp/$1.err"; }
  return "$rc"
}

check "the component exports only its component symbol" sh -c \
  "[ \"\$(nm -D --defined-only '$COMPONENT_DIR/mca_io_romio_jobfs.so' | awk '{print \$NF}')\" = mca_io_romio_jobfs_component ]"
check "local up" sh -c "'$JOBFS' local up -n 3 --dir '$dir' > '$tmp/up.out'"
export JOBFS_CLUSTER=$dir/cluster
check "mkdir /romio" "$JOBFS" mkdir /romio

cd "$tmp" || exit 1   # a relative "jobfs:..." file on the local disk would land here
JOBFS_ROMIO_TRACE=1 mpi subarray jobfs:/romio/subarray
check "subarray: the ranks went through ad_jobfs (trace of the open)" grep -q '^\[ad_jobfs [0-9]*\] open /romio/subarray' "$tmp/subarray.err"
check "subarray: every rank aligns two-phase file domains to the 64K chunks" \
  test "$(grep -c 'opencoll /romio/subarray .*striping_unit=65536' "$tmp/subarray.err")" -eq 4
# Two-phase: only the cb_nodes=2 aggregators write, in whole 64K chunks at chunk boundaries.
grep '^\[ad_jobfs [0-9]*\] write /romio/subarray ' "$tmp/subarray.err" > "$tmp/writes"
check "subarray: two-phase: exactly 2 processes (the aggregators) write" \
  test "$(sed 's/^\[ad_jobfs \([0-9]*\)\].*/\1/' "$tmp/writes" | sort -u | wc -l)" -eq 2
check "subarray: two-phase: every write is one whole chunk at a chunk boundary" sh -c \
  "[ -s '$tmp/writes' ] && awk '{ split(\$5, o, \"=\"); split(\$6, l, \"=\"); if (o[2] % 65536 || l[2] != 65536) bad = 1 } END { exit bad }' '$tmp/writes'"
check "subarray: romio_cb_read=enable: read_all is two-phase" sh -c \
  "! grep -q 'read_all /romio/subarray: independent' '$tmp/subarray.err'"
# With romio_cb_read automatic, the driver chooses: every daemon runs on this node and each
# rank wants half of the bytes its request spans, so read_all reads independently on every
# rank (ad_jobfs.c, ADIOI_JOBFS_ReadStridedColl) ...
(ROMIO_MPI_CB_READ=automatic; export ROMIO_MPI_CB_READ; JOBFS_ROMIO_TRACE=1 mpi subarray jobfs:/romio/subarray-auto)
check "subarray: romio_cb_read=automatic on one node, half of every row each: independent on all 4 ranks" \
  test "$(grep -c '\] read_all /romio/subarray-auto: independent' "$tmp/subarray.err")" -eq 4
# ... and a quarter of every row, where reading the span reads four times the bytes, stays
# two-phase: only the 2 aggregators read.
(ROMIO_MPI_CB_READ=automatic; export ROMIO_MPI_CB_READ; JOBFS_ROMIO_TRACE=1 mpi columns jobfs:/romio/columns)
check "columns: romio_cb_read=automatic, a request four times sparser: two-phase (2 readers)" sh -c \
  "! grep -q 'read_all /romio/columns: independent' '$tmp/columns.err' &&
   [ \"\$(grep '\] read /romio/columns ' '$tmp/columns.err' | sed 's/^\[ad_jobfs \([0-9]*\)\].*/\1/' | sort -u | wc -l)\" -eq 2 ]"
cd - > /dev/null || exit 1
check "subarray: the file is in jobfs, 1048576 bytes (jobfs stat)" sh -c "'$JOBFS' stat /romio/subarray | grep -q 'size: 1048576'"
check "subarray: nothing on the local disk" sh -c "[ ! -e /romio/subarray ] && [ ! -e '$tmp/jobfs:' ] && [ ! -e '$tmp/romio' ]"
"$JOBFS" layout /romio/subarray > "$tmp/layout" 2>&1
check "hints: striping_unit 65536 is the chunk size (jobfs layout)" grep -q '^chunk size: 64K' "$tmp/layout"
check "hints: striping_factor 2 is the stripe count (jobfs layout)" grep -q '^stripe count: 2' "$tmp/layout"

mpi atall jobfs:/romio/atall
# Installed where Open MPI looks by default (here ~/.openmpi/components, as make install puts
# it in Open MPI's own directory): no component path, no --mca flag.
mkdir -p "$tmp/home/.openmpi/components"
cp "$COMPONENT_DIR/mca_io_romio_jobfs.so" "$tmp/home/.openmpi/components/"
(HOME=$tmp/home; export HOME; unset OMPI_MCA_mca_base_component_path; mpi atall jobfs:/romio/atall-home) > /dev/null
check "found in a default component directory, selected by the jobfs: prefix alone" grep -q '^ok - atall: read_at_all' "$tmp/atall.out"
check "... and the file is in jobfs" sh -c "'$JOBFS' stat /romio/atall-home | grep -q 'size: 4000012'"
check "atall: jobfs stat gives 4 * 1000003 bytes" sh -c "'$JOBFS' stat /romio/atall | grep -q 'size: 4000012'"
mpi indep jobfs:/romio/indep
check "indep: jobfs stat gives the exact size" sh -c "'$JOBFS' stat /romio/indep | grep -q 'size: 1600000'"
mpi iwrite jobfs:/romio/iwrite
check "iwrite: jobfs stat gives 4 * 300000 bytes" sh -c "'$JOBFS' stat /romio/iwrite | grep -q 'size: 1200000'"
mpi size jobfs:/romio/size
check "size: jobfs stat gives 100 bytes" sh -c "'$JOBFS' stat /romio/size | grep -q 'size: 100\$'"
mpi excl jobfs:/romio/atall
mpi atomic jobfs:/romio/atomic
# With write behind, a write in atomic mode is on the daemons before the mutex is let go.
(JOBFS_WRITE_BEHIND_MIB=64; export JOBFS_WRITE_BEHIND_MIB; mpi atomic jobfs:/romio/atomic-wb)
# Ranks that wait yield the CPU to the daemons on their node while a jobfs file is open. Open
# MPI yields by itself only when oversubscribed: its setting is made "no" here, whatever the
# host's core count.
(OMPI_MCA_mpi_yield_when_idle=0; export OMPI_MCA_mpi_yield_when_idle; mpi yield jobfs:/romio/yield 2
 JOBFS_MPI_YIELD=0; export JOBFS_MPI_YIELD; mpi yield jobfs:/romio/yield 2)
# One connection per process, kept from its first open to MPI_Finalize: three files one after
# the other and a delete cost each rank one connection to each daemon (jobfs status: conns,
# which counts its own connection too), not one per open.
conns() { "$JOBFS" status | awk '$1 ~ /^[0-9]+$/ { c += $(NF - 7) } END { print c + 0 }'; }
conns0=$(conns)
mpi reopen jobfs:/romio/reopen
conns1=$(conns)
check "reopen: 4 ranks connected once each to the 3 daemons ($conns0 -> $conns1 connections, 3 of them jobfs status's)" \
  test "$((conns1 - conns0))" -eq $((4 * 3 + 3))
mpi delete jobfs:/romio/indep
check "delete: jobfs stat no longer finds it" sh -c "! '$JOBFS' stat /romio/indep > /dev/null 2>&1"
mpi delete jobfs:/romio/nope 1 > /dev/null 2>&1
check "delete of a missing file fails with MPI_ERR_NO_SUCH_FILE (no crash)" grep -q 'not ok - delete: MPI_File_delete' "$tmp/delete.out"

# Errors: no $JOBFS_CLUSTER; then daemons gone (their cluster file kept).
(unset JOBFS_CLUSTER; mpi openfail jobfs:/romio/x 2) > /dev/null
check "without JOBFS_CLUSTER: MPI_File_open fails (MPI_ERR_IO)" grep -q '^open failed: class [0-9]* (MPI_ERR_IO' "$tmp/openfail.out"
check "without JOBFS_CLUSTER: the message names JOBFS_CLUSTER" grep -q 'ad_jobfs: cannot reach the file system for jobfs:/romio/x: JOBFS_CLUSTER is not set' "$tmp/openfail.err"
cp "$dir/cluster" "$tmp/cluster.old"
pids=$(tr "\n" " " < "$dir/pids")
check "local down" "$JOBFS" local down --dir "$dir"
check "no daemon left" sh -c "for p in $pids; do s=\$(awk '{print \$3}' /proc/\$p/stat 2>/dev/null); [ -z \"\$s\" ] || [ \"\$s\" = Z ] || exit 1; done"
(JOBFS_CLUSTER=$tmp/cluster.old; export JOBFS_CLUSTER; mpi openfail jobfs:/romio/x 2) > /dev/null
check "daemons gone: MPI_File_open fails within the time limit" grep -q '^ok - openfail' "$tmp/openfail.out"
check "daemons gone: the message says why" grep -q '^ad_jobfs: ' "$tmp/openfail.err"
sed 's/^/# /' "$tmp/openfail.err" | head -n 4
check "no rank left" sh -c "! pgrep -x romio_mpi > /dev/null"
echo "$fails failed"
[ "$fails" -eq 0 ]
