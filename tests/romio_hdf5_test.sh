#!/bin/sh
# romio_hdf5_test.sh: parallel HDF5 (Debian's libhdf5-openmpi) over the ROMIO jobfs driver:
# 4 ranks create a file "jobfs:/h5/ckpt.h5" with H5Pset_fapl_mpio and write a dataset with a
# collective hyperslab write, then read it back collectively and compare every element
# (tests/helpers/romio_hdf5.c); the writes went through ad_jobfs (its trace) and not to the
# local disk; the same file, read through a jobfs-fuse mount of the same daemons, is a valid
# HDF5 file to h5dump with the values written.
set -u
JOBFS=${JOBFS:-./client/jobfs}
JOBFS_FUSE=${JOBFS_FUSE:-./client/jobfs-fuse}
export JOBFSD=${JOBFSD:-./server/jobfsd}
COMPONENT_DIR=${ROMIO_COMPONENT_DIR:-$(pwd)/romio-adio}
SRC=${HDF5_PROG_SRC:-$(dirname "$0")/helpers/romio_hdf5.c}
dir=$(mktemp -d /tmp/jobfs-h5-XXXXXX)
rm -rf "$dir"
tmp=$(mktemp -d /tmp/jobfs-h5-files-XXXXXX)
mnt=$tmp/mnt
. "$(dirname "$0")/lib.sh"
cleanup() {
  if grep -q " $mnt " /proc/mounts 2>/dev/null; then fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"; fi
  "$JOBFS" local down --dir "$dir" >/dev/null 2>&1; rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

mpi_env "$COMPONENT_DIR"

# Debian's parallel HDF5 compiler wrapper (libhdf5-openmpi-dev; scripts/install-deps has it).
H5PCC=$(command -v h5pcc.openmpi || command -v h5pcc || true)
check "h5pcc (libhdf5-openmpi-dev) and h5dump (hdf5-tools) are installed" sh -c "[ -n '$H5PCC' ] && command -v h5dump >/dev/null"
check "the HDF5 program builds" sh -c "'$H5PCC' -O2 -Wall -o '$tmp/romio_hdf5' '$SRC' > '$tmp/cc.log' 2>&1 || { sed 's/^/# /' '$tmp/cc.log'; false; }"
[ -x "$tmp/romio_hdf5" ] || exit 1

check "local up" sh -c "'$JOBFS' local up -n 3 --dir '$dir' > '$tmp/up.out'"
export JOBFS_CLUSTER=$dir/cluster
check "mkdir /h5" "$JOBFS" mkdir /h5

h5() { # write|read: 4 ranks, at most 180 s; the program's "ok -" lines are passed on
  (cd "$tmp" && JOBFS_ROMIO_TRACE=1 timeout -k 10 180 mpirun --allow-run-as-root --oversubscribe -np 4 \
     ./romio_hdf5 "$1" jobfs:/h5/ckpt.h5 < /dev/null > "$1.out" 2> "$1.err")
  rc=$?
  cat "$tmp/$1.out"
  [ "$rc" -eq 0 ] || { echo "# mpirun romio_hdf5 $1 exited $rc"; grep -v '^\[ad_jobfs' "$tmp/$1.err" | sed 's/^/# /' | head -30; }
  return "$rc"
}
check "write: mpirun exits 0" h5 write
check "write: all 4 ranks opened the file through ad_jobfs" \
  test "$(grep -c '^\[ad_jobfs [0-9]*\] open /h5/ckpt.h5' "$tmp/write.err")" -ge 4
check "write: the dataset went through ad_jobfs writes" grep -q '^\[ad_jobfs [0-9]*\] write /h5/ckpt.h5' "$tmp/write.err"
check "write: nothing on the local disk" sh -c "[ ! -e /h5/ckpt.h5 ] && [ ! -e '$tmp/jobfs:' ] && [ ! -e '$tmp/h5' ]"
# 1024 rows x 1024 ints = 4 MiB of data plus HDF5's own metadata
check "jobfs stat: the file holds at least the 4 MiB of the dataset" sh -c \
  "[ \"\$('$JOBFS' stat /h5/ckpt.h5 | sed -n 's/^ *size: *//p')\" -ge 4194304 ]"
check "read: mpirun exits 0" h5 read

# The same file through a FUSE mount of the same daemons: h5dump reads it as plain HDF5.
mkdir -p "$mnt"
if [ "$(id -u)" -eq 0 ] && [ -c /dev/fuse ] && [ -x "$JOBFS_FUSE" ]; then
  check "mount the same daemons with jobfs-fuse" sh -c "'$JOBFS_FUSE' -o cluster='$dir/cluster' '$mnt'"
  h5dump -H "$mnt/h5/ckpt.h5" > "$tmp/header" 2>&1
  check "h5dump on the mount: dataset /ckpt/step, 1024 x 1024, 32-bit integers" sh -c \
    "grep -q 'DATASET \"step\"' '$tmp/header' && grep -q 'H5T_STD_I32LE' '$tmp/header' && grep -q '( 1024, 1024 )' '$tmp/header'"
  # value(row, col) = row * 7919 + col * 31 + 17, written by rank row / 256
  h5dump -d /ckpt/step -s "1000,5" -c "1,1" "$mnt/h5/ckpt.h5" > "$tmp/elem" 2>&1
  check "h5dump on the mount: element (1000,5), written by rank 3, is 7919172" grep -q '(1000,5): 7919172' "$tmp/elem"
  h5dump -d /ckpt/step -s "0,0" -c "1,1" "$mnt/h5/ckpt.h5" > "$tmp/elem0" 2>&1
  check "h5dump on the mount: element (0,0), written by rank 0, is 17" grep -q '(0,0): 17' "$tmp/elem0"
  check "unmount" sh -c "fusermount3 -u '$mnt'"
else
  check "jobfs-fuse needs root and /dev/fuse (CI has both)" false
fi

exit $((fails > 0))
