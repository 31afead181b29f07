#!/bin/sh
# posix_test.sh: tests/posix/posix_check (exact errno of POSIX calls) against a jobfs-fuse
# mount of three local daemons, and against a local directory as the control: a case that fails
# on the local disk is a bug of the check, not of jobfs. Then once more through a second mount
# with -o no_direct_writes (writable descriptors through the page cache, where the default
# bypasses it). Needs root and /dev/fuse (skipped otherwise).
set -u
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
JOBFS=$(abs "${JOBFS:-./client/jobfs}")
JOBFS_FUSE=$(abs "${JOBFS_FUSE:-./client/jobfs-fuse}")
CHECK=$(abs "${POSIX_CHECK:-./tests/posix/posix_check}")
export JOBFSD=$(abs "${JOBFSD:-./server/jobfsd}")
if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
  echo "ok - # SKIP the POSIX check needs root, /dev/fuse and fusermount3"
  exit 0
fi
dir=$(mktemp -d /tmp/jobfs-posix-XXXXXX)
rm -rf "$dir"
tmp=$(mktemp -d /tmp/jobfs-posix-files-XXXXXX)
chmod 755 "$tmp"
mnt=$tmp/mnt
cached=$tmp/mnt-cached
local_dir=$(mktemp -d /var/tmp/jobfs-posix-control-XXXXXX)
chmod 755 "$local_dir"
mkdir "$mnt" "$cached"
cleanup() {
  for m in "$mnt" "$cached"; do
    grep -q " $m fuse.jobfs " /proc/mounts && { fusermount3 -u "$m" 2>/dev/null || umount -l "$m"; }
  done
  "$JOBFS" local down --dir "$dir" >/dev/null 2>&1
  rm -rf --one-file-system "$tmp" "$local_dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fails=0

# The control first: its cases name themselves "control: ...".
timeout -k 5 300 "$CHECK" "$local_dir" > "$tmp/control.out" 2>&1
control_rc=$?
sed -n 's/^\(not \)\{0,1\}ok - /&control: /p' "$tmp/control.out"
[ "$control_rc" -eq 0 ] || fails=$((fails + 1))

if "$JOBFS" local up -n 3 --dir "$dir" > /dev/null && "$JOBFS_FUSE" --cluster "$dir/cluster" "$mnt"; then
  timeout -k 5 300 "$CHECK" "$mnt" > "$tmp/jobfs.out" 2>&1
  rc=$?
  sed -n 's/^\(not \)\{0,1\}ok - /&jobfs: /p' "$tmp/jobfs.out"
  [ "$rc" -eq 0 ] || { fails=$((fails + 1)); grep -v '^\(not \)\{0,1\}ok - ' "$tmp/jobfs.out" | sed 's/^/# /'; }
  if mkdir "$mnt/cached" && "$JOBFS_FUSE" --cluster "$dir/cluster" -o no_direct_writes "$cached"; then
    timeout -k 5 300 "$CHECK" "$cached/cached" > "$tmp/cached.out" 2>&1
    rc=$?
    sed -n 's/^\(not \)\{0,1\}ok - /&jobfs (no_direct_writes): /p' "$tmp/cached.out"
    [ "$rc" -eq 0 ] || { fails=$((fails + 1)); grep -v '^\(not \)\{0,1\}ok - ' "$tmp/cached.out" | sed 's/^/# /'; }
  else
    echo "not ok - jobfs (no_direct_writes): mount"
    fails=$((fails + 1))
  fi
else
  echo "not ok - jobfs: local up and mount"
  fails=$((fails + 1))
fi
echo "$fails failed"
[ "$fails" -eq 0 ]
