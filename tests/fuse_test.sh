#!/bin/sh
# fuse_test.sh: jobfs-fuse end to end: three real daemons (jobfs local up), two real mounts of
# them (one in the foreground, one daemonised, as two nodes would have), exercised with plain
# shell tools; bytes compared, errors checked by their exact messages and errno, and both
# mounts ended cleanly (SIGTERM, fusermount3 -u) with no process or mount left behind.
# Needs root and /dev/fuse (the case is skipped otherwise).
set -u
JOBFS=${JOBFS:-./client/jobfs}
JOBFS_FUSE=${JOBFS_FUSE:-./client/jobfs-fuse}
export JOBFSD=${JOBFSD:-./server/jobfsd}
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
JOBFS=$(abs "$JOBFS")
JOBFS_FUSE=$(abs "$JOBFS_FUSE")
JOBFSD=$(abs "$JOBFSD")
MOUNT_HELPER=$(abs "${MOUNT_HELPER:-./client/mount.jobfs}")
LOCKPY="python3 $(abs "$(dirname "$0")")/helpers/fcntl_lock.py"
if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
  echo "ok - # SKIP jobfs-fuse needs root, /dev/fuse and fusermount3"
  exit 0
fi
dir=$(mktemp -d /tmp/jobfs-fuse-XXXXXX)
rm -rf "$dir"
tmp=$(mktemp -d /tmp/jobfs-fuse-files-XXXXXX)
chmod 755 "$tmp" # another user must reach the mount points below it
mnt=$tmp/mnt
mnt2=$tmp/mnt2
mkdir "$mnt" "$mnt2" "$tmp/nice" "$tmp/mntlk"
pid1=
fails=0
check() { # NAME CMD...: runs program CMD (at most 120 s), counts a failure if it fails
  name=$1; shift
  if timeout -k 5 120 "$@"; then echo "ok - $name"; else echo "not ok - $name"; fails=$((fails + 1)); fi
}
checkf() { # NAME FUNCTION...: the same for a shell function of this file (bounded itself)
  name=$1; shift
  if "$@"; then echo "ok - $name"; else echo "not ok - $name"; fails=$((fails + 1)); fi
}
mounted() { grep -q " $1 fuse.jobfs " /proc/mounts; }
wait_for() { # SECONDS CMD...: polls CMD every 0.1 s until it succeeds or the time is up
  n=$(($1 * 10)); shift
  while [ "$n" -gt 0 ]; do "$@" && return 0; sleep 0.1; n=$((n - 1)); done
  return 1
}
pid_of_mount() { # the jobfs-fuse serving mount point $1 (its path is unique to this run)
  for p in /proc/[0-9]*; do
    tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -q "jobfs-fuse .*$1\( \|$\)" && { echo "${p#/proc/}"; return; }
  done
}
alive() { s=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null); [ -n "$s" ] && [ "$s" != Z ]; }
cleanup() {
  for m in "$tmp/nice" "$tmp/mntwb" "$tmp/mnt3" "$tmp/mntlk" "$mnt2" "$mnt"; do
    if mounted "$m"; then fusermount3 -u "$m" 2>/dev/null || umount -l "$m"; fi
  done
  if [ -n "$pid1" ]; then wait_for 10 sh -c "! kill -0 $pid1 2>/dev/null" || kill -KILL "$pid1" 2>/dev/null; fi
  "$JOBFS" local down --dir "$dir" >/dev/null 2>&1
  if grep -q " $tmp/full tmpfs " /proc/mounts; then
    "$JOBFS" local down --dir "$tmp/full/c" >/dev/null 2>&1
    umount -l "$tmp/full"
  fi
  rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

check "local up" sh -c "'$JOBFS' local up -n 3 --dir '$dir' > '$tmp/up.out'"
"$JOBFS_FUSE" --cluster "$dir/cluster" "$mnt" -f 2> "$tmp/fuse1.log" &
pid1=$!
checkf "mount in the foreground shows in /proc/mounts as fuse.jobfs" wait_for 15 mounted "$mnt"
check "a daemonised mount is up when jobfs-fuse returns" sh -c "'$JOBFS_FUSE' -o cluster='$dir/cluster' '$mnt2' && grep -q ' $mnt2 fuse.jobfs ' /proc/mounts"
checkf "the mount's kernel readahead is raised to 4 MiB" wait_for 10 sh -c "[ \"\$(cat /sys/class/bdi/\$(mountpoint -d '$mnt')/read_ahead_kb)\" = 4096 ]"
# The kernel's view of the connection (fusectl, mounted here if it is not): 128 background
# requests, so that readahead runs ahead of a sequential reader (jobfs_fuse.cc, kMaxBackground).
grep -q ' /sys/fs/fuse/connections fusectl ' /proc/mounts || mount -t fusectl fusectl /sys/fs/fuse/connections 2> /dev/null || true
conn=/sys/fs/fuse/connections/$(mountpoint -d "$mnt" | cut -d: -f2)
check "the mount lets the kernel keep 128 background requests in flight (readahead)" sh -c "[ \"\$(cat '$conn/max_background')\" = 128 ] && [ \"\$(cat '$conn/congestion_threshold')\" = 96 ]"
check "mounts are allow_other and default_permissions under root" sh -c "grep ' $mnt fuse.jobfs ' /proc/mounts | grep -q 'default_permissions,allow_other'"
# thread_nices PID: the distinct nice values of the process's threads (field 19 of each stat).
thread_nices() { for t in /proc/"$1"/task/*; do awk '{print $19}' "$t/stat"; done 2>/dev/null | sort -u | tr '\n' ' '; }
nices=$(thread_nices "$pid1")
check "every thread of a mount runs at nice -10, as jobfsd's (${nices})" test "$nices" = "-10 "
nices=none
if "$JOBFS_FUSE" -o cluster="$dir/cluster",nice=-3 "$tmp/nice"; then
  nices=$(thread_nices "$(pid_of_mount "$tmp/nice")")
  fusermount3 -u "$tmp/nice"
fi
check "every thread of a mount with -o nice=-3 runs at -3 (${nices})" test "$nices" = "-3 "
check "-o nice=40 is refused with a jobfs-fuse: message" sh -c "! '$JOBFS_FUSE' -o cluster='$dir/cluster',nice=40 '$tmp/nice' -f 2> '$tmp/nice.err' && grep -q '^jobfs-fuse: invalid: nice=40: not a nice value (-20 to 19)' '$tmp/nice.err'"
check "a mount without a cluster descriptor fails with a jobfs-fuse: message" sh -c "JOBFS_CLUSTER= '$JOBFS_FUSE' '$tmp' -f 2>&1 | grep -q '^jobfs-fuse: cluster descriptor'"

cd "$mnt" || exit 1
check "mkdir -p" sh -c "mkdir -p a/b/c && [ -d a/b/c ]"
check "echo and cat" sh -c "echo hello > a/b/c/f && [ \"\$(cat a/b/c/f)\" = hello ]"
head -c 67108864 /dev/urandom > "$tmp/big"
check "dd of 64 MiB in, cmp equal" sh -c "dd if='$tmp/big' of=big bs=1M status=none && cmp big '$tmp/big'"
check "stat shows 64 MiB" sh -c "[ \$(stat -c %s big) -eq 67108864 ]"
check "dd out with 4 KiB blocks, cmp equal" sh -c "dd if=big of='$tmp/big.out' bs=4k status=none && cmp '$tmp/big' '$tmp/big.out'"
# The mount reads the chunks of this host's daemons from their chunk files and hands them
# its large writes through a shared-memory write arena, as libjobfs does (local_reads.h): the
# daemons count both (jobfs status: local reads, MiB of arena writes).
io_counters() { # prints "local-reads arena-MiB" summed over the daemons
  JOBFS_CLUSTER="$dir/cluster" "$JOBFS" status | awk '$1 ~ /^[0-9]+$/ { r += $(NF - 6); w += $(NF - 5) } END { print r, w }'
}
delegations() { # directories the daemons delegated so far (jobfs status, last column)
  JOBFS_CLUSTER="$dir/cluster" "$JOBFS" status | awk '$1 ~ /^[0-9]+$/ { d += $NF } END { print d + 0 }'
}
set -- $(io_counters)
reads0=${1:-0} arena0=${2:-0}
check "dd of 64 MiB in again, dropped from the page cache, read back equal" sh -c \
  "dd if='$tmp/big' of=local-io bs=1M status=none && sync && echo 3 > /proc/sys/vm/drop_caches && cmp local-io '$tmp/big'"
set -- $(io_counters)
check "the mount wrote through the daemons' write arenas (${arena0} -> ${2:-?} MiB)" \
  awk -v a="$arena0" -v b="${2:-0}" 'BEGIN { exit !(b - a >= 32) }'
check "the mount read chunks from the daemons' files (${reads0} -> ${1:-?} local reads)" test "${1:-0}" -gt "$reads0"
check "ls of 1,000 files" sh -c "mkdir many && cd many && seq 1 1000 | xargs touch && [ \$(ls | wc -l) -eq 1000 ] && [ \$(ls -l | grep -c '^-rw') -eq 1000 ] && [ \$(find . -type f | wc -l) -eq 1000 ]"
check "rm of 1,000 files" sh -c "rm -r many && [ ! -e many ]"
check "mv a file across directories" sh -c "mkdir x y && echo moved > x/f && mv x/f y/g && [ ! -e x/f ] && [ \"\$(cat y/g)\" = moved ]"
check "mv a directory across directories" sh -c "mv a y/a2 && [ ! -e a ] && [ \"\$(cat y/a2/b/c/f)\" = hello ]"
check "mv over an existing file replaces it" sh -c "echo new > x/n && mv x/n y/g && [ \"\$(cat y/g)\" = new ] && [ ! -e x/n ]"
check "ln: a hard link shares the inode, nlink 2" sh -c "ln y/g x/h && [ \$(stat -c %i y/g) = \$(stat -c %i x/h) ] && [ \$(stat -c %h y/g) -eq 2 ] && [ \"\$(cat x/h)\" = new ]"
check "ln -s and readlink" sh -c "ln -s ../y/g x/s && [ \"\$(readlink x/s)\" = ../y/g ] && [ \"\$(cat x/s)\" = new ] && [ -L x/s ]"
check "chmod shows in stat" sh -c "chmod 640 y/g && [ \$(stat -c %a y/g) = 640 ] && chmod 2755 y && [ \$(stat -c %a y) = 2755 ]"
check "touch -d sets mtime" sh -c "touch -d '2001-02-03 04:05:06 UTC' y/g && [ \$(stat -c %Y y/g) -eq \$(date -d '2001-02-03 04:05:06 UTC' +%s) ]"
check "touch -a keeps mtime, sets atime" sh -c "touch -a -d '2002-01-01 00:00:00 UTC' y/g && [ \$(stat -c %X y/g) -eq \$(date -d '2002-01-01 00:00:00 UTC' +%s) ] && [ \$(stat -c %Y y/g) -eq \$(date -d '2001-02-03 04:05:06 UTC' +%s) ]"
check "truncate shrinks: the first bytes stay" sh -c "truncate -s 1000000 big && [ \$(stat -c %s big) -eq 1000000 ] && head -c 1000000 '$tmp/big' | cmp - big"
check "truncate grows: zeros after the end" sh -c "truncate -s 2000000 big && [ \$(stat -c %s big) -eq 2000000 ] && tail -c 1000000 big | cmp - /dev/zero 2>&1 | grep -q EOF"
check "O_TRUNC through > empties a file" sh -c "printf abcdef > t && printf xy > t && [ \"\$(cat t)\" = xy ] && [ \$(stat -c %s t) -eq 2 ]"
check "appends with >>" sh -c "echo one > ap && echo two >> ap && [ \"\$(cat ap)\" = \"\$(printf 'one\ntwo')\" ]"
check "df shows a size" sh -c "[ \$(df -P . | awk 'NR==2 {print \$2}') -gt 0 ] && df -P . | grep -q '^jobfs '"
if command -v setfattr >/dev/null && command -v getfattr >/dev/null; then
  check "setfattr and getfattr" sh -c "setfattr -n user.k -v v1 y/g && [ \"\$(getfattr -n user.k --only-values y/g)\" = v1 ] && setfattr -x user.k y/g && ! getfattr -n user.k y/g 2>/dev/null"
  # The kernel asks for security.capability before each write and drops it if set; the mount
  # remembers its absence for attr_timeout (the writes before the setfattr), and the setfattr
  # on this mount must make the next write ask again and drop it.
  check "a write drops a security.capability set just before on the mount" sh -c "printf a > capf && printf b >> capf && setfattr -n security.capability -v 0sAQAAAgAgAAAAAAAAAAAAAAAAAAA= capf && getfattr -n security.capability capf > /dev/null && printf c >> capf && ! getfattr -n security.capability capf 2> /dev/null && [ \"\$(cat capf)\" = abc ]"
else
  echo "ok - # SKIP setfattr and getfattr (the attr package is not installed)"
  echo "ok - # SKIP a write drops a security.capability (the attr package is not installed)"
fi
if command -v python3 >/dev/null; then
  check "xattrs through os.setxattr: set, get, list, ENODATA, remove" python3 -c "
import errno, os
p = 'y/g'
os.setxattr(p, 'user.color', b'blue')
assert os.getxattr(p, 'user.color') == b'blue'
assert 'user.color' in os.listxattr(p)
try:
    os.getxattr(p, 'user.none'); raise SystemExit('no error')
except OSError as e:
    assert e.errno == errno.ENODATA, e
os.removexattr(p, 'user.color')
assert 'user.color' not in os.listxattr(p)
"
  check "errno: ENOENT, EEXIST, ENOTEMPTY, EISDIR, ENOTDIR, EXDEV-free rename" python3 -c "
import errno, os
def err(f, *a):
    try:
        f(*a)
    except OSError as e:
        return e.errno
    return 0
assert err(os.stat, 'nope') == errno.ENOENT
assert err(os.mkdir, 'y') == errno.EEXIST
assert err(os.open, 'y/g', os.O_CREAT | os.O_EXCL | os.O_WRONLY) == errno.EEXIST
assert err(os.rmdir, 'y') == errno.ENOTEMPTY
assert err(os.open, 'y', os.O_WRONLY) == errno.EISDIR
assert err(os.mkdir, 'y/g/sub') == errno.ENOTDIR
assert err(os.unlink, 'y') == errno.EISDIR
os.rename('y/g', 'x/g2'); os.rename('x/g2', 'y/g')
"
  check "a file unlinked while open takes writes, reads them back, fstat sees them" python3 -c "
import os
fd = os.open('w', os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b'before')
os.unlink('w')
assert not os.path.exists('w')
os.pwrite(fd, b'after unlink', 6)
assert os.pread(fd, 100, 0) == b'beforeafter unlink', os.pread(fd, 100, 0)
assert os.fstat(fd).st_size == 18 and os.fstat(fd).st_nlink == 0, os.fstat(fd)
os.fsync(fd)
os.close(fd)
"
else
  echo "ok - # SKIP errno checks (python3 is not installed)"
fi
check "error messages: No such file, File exists, Directory not empty" sh -c "
  cat nope 2>&1 | grep -q 'No such file or directory' &&
  mkdir y 2>&1 | grep -q 'File exists' &&
  rmdir y 2>&1 | grep -q 'Directory not empty'"
check "a file unlinked while open still reads" sh -c "printf 'still here' > u && exec 3< u && rm u && [ ! -e u ] && [ \"\$(cat <&3)\" = 'still here' ]"
check "permission denied for another user in a root 0755 directory" sh -c "mkdir -m 755 rootdir && ! setpriv --reuid=1000 --regid=1000 --clear-groups touch rootdir/x 2>'$tmp/perm' && grep -q 'Permission denied' '$tmp/perm' && [ ! -e rootdir/x ]"
check "another user's files are theirs" sh -c "mkdir userdir && chown 1000:1000 userdir && setpriv --reuid=1000 --regid=1000 --clear-groups sh -c 'echo mine > userdir/f && mkdir userdir/d' && [ \$(stat -c %u:%g userdir/f) = 1000:1000 ] && [ \$(stat -c %u userdir/d) = 1000 ]"
check "another user may not chmod root's file (EPERM)" sh -c "! setpriv --reuid=1000 --regid=1000 --clear-groups chmod 777 y/g 2>'$tmp/perm' && grep -q 'Operation not permitted' '$tmp/perm'"
check "another user may not read a 0600 file" sh -c "echo secret > sec && chmod 600 sec && ! setpriv --reuid=1000 --regid=1000 --clear-groups cat sec 2>/dev/null"

# tar: a small tree in, out again, identical checksums (sizes around the 4 MiB chunk too).
mkdir -p "$tmp/src/d1/d2" "$tmp/src/empty"
head -c 12345 /dev/urandom > "$tmp/src/small"
head -c 5000000 /dev/urandom > "$tmp/src/d1/chunky"
: > "$tmp/src/d1/zero"
echo text > "$tmp/src/d1/d2/t"
chmod 600 "$tmp/src/d1/d2/t"
ln -s d1/d2/t "$tmp/src/link"
check "tar extract keeps bytes, modes, links" sh -c "
  tar -C '$tmp/src' -cf '$tmp/t.tar' . && mkdir tree && tar -C tree -xf '$tmp/t.tar' &&
  (cd '$tmp/src' && find . -type f -print | sort | xargs sha256sum; find . -printf '%p %y %m %l\\n' | sort) > '$tmp/sum.src' &&
  (cd tree && find . -type f -print | sort | xargs sha256sum; find . -printf '%p %y %m %l\\n' | sort) > '$tmp/sum.mnt' &&
  [ \$(wc -l < '$tmp/sum.src') -eq 13 ] && cmp '$tmp/sum.src' '$tmp/sum.mnt'"
check "tar re-create from the mount, extracted elsewhere: identical checksums" sh -c "
  tar -C tree -cf '$tmp/t2.tar' . && mkdir '$tmp/dst' && tar -C '$tmp/dst' -xf '$tmp/t2.tar' &&
  (cd '$tmp/dst' && find . -type f -print | sort | xargs sha256sum; find . -printf '%p %y %m %l\\n' | sort) > '$tmp/sum.dst' &&
  cmp '$tmp/sum.src' '$tmp/sum.dst'"

# Appends from several processes at once: every record whole, none lost.
check "O_APPEND from 4 processes: 4 x 200 records, none torn or lost" sh -c "
  for w in 1 2 3 4; do (i=0; while [ \$i -lt 200 ]; do printf 'writer %s record %03d %s\n' \$w \$i 0123456789abcdefghijklmnopqrstuvwxyz >> appended; i=\$((i + 1)); done) & done; wait
  [ \$(wc -l < appended) -eq 800 ] && [ \$(grep -c '^writer [1-4] record [0-9][0-9][0-9] 0123456789abcdefghijklmnopqrstuvwxyz\$' appended) -eq 800 ] &&
  [ \$(sort -u appended | wc -l) -eq 800 ] || {
    # What went wrong, for whoever looks next (a lost record was once an attribute reply
    # merged after the writer's release: ClientTest.InodeClientAttributesFromBeforeAReleaseKeepItsWrites).
    echo \"appended: \$(stat -c %s appended) bytes, \$(wc -l < appended) lines, \$(sort -u appended | wc -l) distinct\" >&2
    grep -a -v -n '^writer [1-4] record [0-9][0-9][0-9] 0123456789abcdefghijklmnopqrstuvwxyz\$' appended | head -5 | od -c | head -20 >&2
    false; }"
# Appends of two nodes to one log, each writer holding its descriptor open (as a logging
# library does): the kernel of each mount places a write at the size it last knew, which
# misses the other mount's appends (400 of the 800 records were overwritten so).
check "O_APPEND from both mounts, descriptors held open: 4 x 200 records, none lost" sh -c "
  for w in 1 2 3 4; do m='$mnt'; [ \$w -gt 2 ] && m='$mnt2'; (exec 3>> \$m/shared-log; i=0; while [ \$i -lt 200 ]; do printf 'writer %s record %03d %s\n' \$w \$i 0123456789abcdefghijklmnopqrstuvwxyz >&3; i=\$((i + 1)); done) & done; wait
  [ \$(sort -u shared-log | grep -c '^writer [1-4] record [0-9][0-9][0-9] 0123456789abcdefghijklmnopqrstuvwxyz\$') -eq 800 ] &&
  [ \$(stat -c %s shared-log) -eq 45600 ] && cmp -s shared-log '$mnt2/shared-log' || {
    echo \"shared-log: \$(stat -c %s shared-log) bytes, \$(sort -u shared-log | wc -l) distinct lines\" >&2; false; }"
# A sparse file: the hole reads zeros and takes no space on the daemons' disks.
check "sparse file: 1 GiB with two written bytes, holes read zeros, no space taken" sh -c "
  before=\$(du -sk '$dir' | cut -f1) &&
  printf A | dd of=sparse bs=1 seek=0 conv=notrunc status=none &&
  printf Z | dd of=sparse bs=1 seek=1073741823 conv=notrunc status=none &&
  [ \$(stat -c %s sparse) -eq 1073741824 ] &&
  dd if=sparse bs=1M skip=512 count=1 status=none | cmp -s - /dev/zero -n 1048576 &&
  [ \"\$(tail -c 1 sparse)\" = Z ] && [ \"\$(head -c 1 sparse)\" = A ] &&
  after=\$(du -sk '$dir' | cut -f1) && [ \$((after - before)) -lt 16384 ]"
# Real tools.
mkdir -p "$tmp/cpa/sub"
echo one > "$tmp/cpa/f1"; echo two > "$tmp/cpa/sub/f2"
chmod 751 "$tmp/cpa/sub"; chmod 604 "$tmp/cpa/f1"
touch -d '2003-04-05 06:07:08 UTC' "$tmp/cpa/f1" "$tmp/cpa/sub/f2" "$tmp/cpa/sub"
check "cp -a keeps contents, modes and times" sh -c "
  cp -a '$tmp/cpa' cpa &&
  (cd '$tmp/cpa' && find . -printf '%p %m %T@\\n' -type f -exec cat {} \\; | sort) > '$tmp/cpa.src' &&
  (cd cpa && find . -printf '%p %m %T@\\n' -type f -exec cat {} \\; | sort) > '$tmp/cpa.mnt' &&
  grep -v '^\\. ' '$tmp/cpa.src' > '$tmp/cpa.src2' && grep -v '^\\. ' '$tmp/cpa.mnt' > '$tmp/cpa.mnt2' &&
  cmp '$tmp/cpa.src2' '$tmp/cpa.mnt2'"
if command -v git >/dev/null; then
  check "git init, add, commit, log and fsck on the mount" sh -c "
    mkdir repo && cd repo && git init -q . && git config user.email t@example.com && git config user.name t &&
    echo 'first' > README && git add README && git commit -qm first &&
    echo 'second' >> README && git commit -qam second &&
    [ \$(git log --oneline | wc -l) -eq 2 ] && git fsck --no-progress 2>&1 | { ! grep -qi error; }"
else
  echo "ok - # SKIP git (not installed)"
fi
if command -v cc >/dev/null; then
  check "a C program built on the mount runs" sh -c "
    mkdir cprog && printf '#include <stdio.h>\nint main(void) { puts(\"built on jobfs\"); return 0; }\n' > cprog/hello.c &&
    cc -O2 -o cprog/hello cprog/hello.c && [ \"\$(./cprog/hello)\" = 'built on jobfs' ]"
else
  echo "ok - # SKIP C compiler (not installed)"
fi
if command -v rsync >/dev/null; then
  check "rsync -a of a tree, and a second rsync finds nothing to copy" sh -c "
    rsync -a '$tmp/src/' rs/ && rsync -ai '$tmp/src/' rs/ > '$tmp/rs2' && [ ! -s '$tmp/rs2' ]"
else
  echo "ok - # SKIP rsync (not installed)"
fi

# Two mounts of the same daemons, as two nodes have.
head -c 3000000 /dev/urandom > "$tmp/shared"
check "written and closed on one mount, the same bytes on the other" sh -c "cp '$tmp/shared' shared && cmp '$tmp/shared' '$mnt2/shared'"
check "close-to-open: a rewrite on one mount is read whole on the other right away" sh -c "
  echo old > c2c && [ \"\$(cat '$mnt2/c2c')\" = old ] && stat '$mnt2/c2c' >/dev/null &&
  echo 'a longer new content' > c2c && [ \"\$(cat '$mnt2/c2c')\" = 'a longer new content' ]"
check "a new name on one mount is found on the other" sh -c "mkdir newdir && echo n > newdir/f && [ \"\$(cat '$mnt2/newdir/f')\" = n ]"
check "an unlink on one mount shows on the other" sh -c "rm shared && ! cat '$mnt2/shared' > /dev/null 2>&1"
# The other mount's kernel still holds the name (entry_timeout) for the old inode: the open finds
# it gone (ESTALE), looks the name up again and opens the new file (ENOENT left the name unusable).
check "a name made again on one mount opens on the other at once" sh -c "
  echo first > again && [ \"\$(cat '$mnt2/again')\" = first ] && rm again && echo second > again &&
  [ \"\$(cat '$mnt2/again')\" = second ] && [ \"\$(stat -c %s '$mnt2/again')\" = 7 ]"
deleg0=$(delegations)
check "500 files made on one mount (a delegated directory) are all on the other at once" sh -c "
  mkdir bulk && (cd bulk && seq 1 500 | xargs touch) && [ \$(ls '$mnt2/bulk' | wc -l) -eq 500 ] &&
  [ \$(stat -c %s:%a '$mnt2/bulk/500') = 0:644 ] && [ \$(stat -c %Y bulk) -eq \$(stat -c %Y '$mnt2/bulk') ]"
check "the directory was delegated to the mount ($deleg0 -> $(delegations) delegations)" test "$(delegations)" -gt "$deleg0"
check "250 of them removed on one mount are gone on the other at once" sh -c "
  (cd bulk && seq 1 250 | xargs rm) && [ \$(ls '$mnt2/bulk' | wc -l) -eq 250 ] && [ ! -e '$mnt2/bulk/250' ] && [ -e '$mnt2/bulk/251' ]"
# Locks are the daemons' (server/file_locks.h): one taken through one mount holds on the other.
locks() { # flock and fcntl locks the daemons hold now (jobfs status: locks)
  JOBFS_CLUSTER="$dir/cluster" "$JOBFS" status | awk '$1 ~ /^[0-9]+$/ { l += $(NF - 8) } END { print l + 0 }'
}
echo lock > locked
# (Holders keep their lock for 8 s: the checks while they hold it must be done by then, also
# on a busy machine.)
$LOCKPY locked flock-hold 0 0 8 > "$tmp/flock.out" &
hold=$!
checkf "flock: an exclusive lock held through one mount" wait_for 5 grep -q held "$tmp/flock.out"
check "flock: ... refused (LOCK_NB) on the other" sh -c "! flock -n '$mnt2/locked' true"
check "flock: the daemons hold it (jobfs status: $(locks) locks)" test "$(locks)" -ge 1
check "flock: a waiter on the other mount gets it once the holder is done" sh -c "
  flock '$mnt2/locked' grep -q done '$tmp/flock.out'"
wait "$hold"
$LOCKPY locked hold 0 100 8 > "$tmp/fcntl.out" &
hold=$!
checkf "fcntl: a write lock on bytes 0-99 held through one mount" wait_for 5 grep -q held "$tmp/fcntl.out"
check "fcntl: an overlapping one on the other mount is refused with EAGAIN" \
  sh -c "[ \"\$($LOCKPY '$mnt2/locked' try 50 10)\" = 'refused 11' ]"
check "fcntl: the bytes after it are free" sh -c "[ \"\$($LOCKPY '$mnt2/locked' try 100 10)\" = got ]"
check "fcntl: F_GETLK on the other mount names the lock and its process" \
  sh -c "[ \"\$($LOCKPY '$mnt2/locked' get 0 0)\" = 'write 0 100 $hold' ]"
check "fcntl: F_SETLKW on the other mount gets it once the holder is done (its close gave it back)" \
  sh -c "[ \"\$($LOCKPY '$mnt2/locked' wait 0 1)\" = got ] && grep -q done '$tmp/fcntl.out'"
wait "$hold"
# What a lock protects is seen as it is: the reader's mount (attributes and pages cached for
# 30 s) reads the bytes another mount wrote under a lock, once it takes the lock after it,
# through a file it kept open; the writer keeps its file open too (no close-to-open).
check "a mount that caches for 30 s" "$JOBFS_FUSE" -o cluster="$dir/cluster",attr_timeout=30,entry_timeout=30 "$tmp/mntlk"
printf 'old old old\n' > guarded
$LOCKPY "$tmp/mntlk/guarded" reread 0 11 "$tmp/rewritten" > "$tmp/reread.out" &
hold=$!
checkf "locks: the reader read the old bytes" wait_for 5 grep -q '^old old old$' "$tmp/reread.out"
check "locks: another mount rewrites them under a write lock, and gives it back" \
  $LOCKPY "$mnt2/guarded" rewrite 0 'new new new' "$tmp/rewritten"
wait "$hold"
check "locks: the reader's read lock after it reads the new bytes (not its cached ones)" \
  sh -c "[ \"\$(sed -n 2p '$tmp/reread.out')\" = 'new new new' ]"
# The same with flock, the bytes written through another descriptor than the one whose close
# gives the lock back (a read-only one: its close alone settles nothing), and appended, so that
# the reader needs the settled size too.
printf 'old\n' > fguarded
$LOCKPY "$tmp/mntlk/fguarded" flock-reread 0 100 "$tmp/frewritten" > "$tmp/freread.out" &
hold=$!
checkf "flock: the reader read the old bytes" wait_for 5 grep -q '^old $' "$tmp/freread.out"
check "flock: another mount appends under a flock of a read-only descriptor, and closes that one" \
  $LOCKPY "$mnt2/fguarded" flock-rewrite 4 'new' "$tmp/frewritten"
wait "$hold"
check "flock: the reader's shared flock after it reads the appended bytes" \
  sh -c "[ \"\$(sed -n 2p '$tmp/freread.out')\" = 'old new' ]"
check "the caching mount: unmount" fusermount3 -u "$tmp/mntlk"
check "no lock is left at the daemons ($(locks))" test "$(locks)" -eq 0
# A mount that dies holding a lock: its connection is gone, and the daemons let its locks go.
mntlk=$tmp/mntlk
check "a third mount" "$JOBFS_FUSE" -o cluster="$dir/cluster" "$mntlk"
$LOCKPY "$mntlk/locked" flock-hold 0 0 60 > "$tmp/dead.out" 2>&1 &
hold=$!
checkf "flock: held through the third mount" wait_for 5 grep -q held "$tmp/dead.out"
check "... refused on the other" sh -c "! flock -n '$mnt2/locked' true"
kill -KILL "$(pid_of_mount "$mntlk")" 2>/dev/null
checkf "its jobfs-fuse killed (kill -9): the other mount gets the lock" wait_for 10 flock -n "$mnt2/locked" true
kill "$hold" 2>/dev/null; wait "$hold" 2>/dev/null
umount -l "$mntlk"
# -o local_locks: the kernel of each node keeps them, as without lock handlers.
check "mount with -o local_locks" "$JOBFS_FUSE" -o cluster="$dir/cluster",local_locks "$mntlk"
$LOCKPY locked flock-hold 0 0 8 > "$tmp/local.out" &
hold=$!
checkf "-o local_locks: a lock held through another mount" wait_for 5 grep -q held "$tmp/local.out"
check "-o local_locks: ... is not seen there" flock -n "$mntlk/locked" true
check "-o local_locks: ... while a mount with the daemons' locks still sees it" sh -c "! flock -n '$mnt2/locked' true"
wait "$hold"
check "-o local_locks: unmount" sh -c "fusermount3 -u '$mntlk' && ! grep -q ' $mntlk fuse.jobfs ' /proc/mounts"
check "rm -r of everything" sh -c "rm -rf -- * && [ -z \"\$(ls -A)\" ] && [ -z \"\$(ls -A '$mnt2')\" ]"
cd / || exit 1

# The mount(8) helper, called the way mount -t jobfs (or an fstab line) calls it.
mnt3=$tmp/mnt3
mkdir "$mnt3"
check "the mount helper was built" test -x "$MOUNT_HELPER"
if [ -x "$MOUNT_HELPER" ]; then
  check "mount.jobfs CLUSTER DIR -o rw,_netdev,attr_timeout=2 mounts, keeping only jobfs's options" sh -c "
    JOBFS_FUSE='$JOBFS_FUSE' '$MOUNT_HELPER' '$dir/cluster' '$mnt3' -o rw,_netdev,noauto,attr_timeout=2 &&
    grep -q ' $mnt3 fuse.jobfs ' /proc/mounts && ls '$mnt3' > /dev/null"
  check "umount of a helper mount" sh -c "umount '$mnt3' && ! grep -q ' $mnt3 fuse.jobfs ' /proc/mounts"
  check "mount.jobfs with a missing cluster file: exit 1 and the reason" sh -c "
    JOBFS_FUSE='$JOBFS_FUSE' '$MOUNT_HELPER' '$tmp/no-cluster' '$mnt3' 2>&1 | grep -q 'no readable cluster descriptor' &&
    ! JOBFS_FUSE='$JOBFS_FUSE' '$MOUNT_HELPER' '$tmp/no-cluster' '$mnt3' 2>/dev/null"
fi

# -o no_local_io: every byte over the transport, so neither counter of jobfs status moves
# (the other mounts are idle now). 1 MiB writes: a small write(2) (head's 8 KiB) goes to the
# daemons as a small request, below the arena's 64 KiB, and would leave the arena unused anyway.
check "mount with -o no_local_io" sh -c "'$JOBFS_FUSE' -o cluster='$dir/cluster',no_local_io '$mnt3'"
set -- $(io_counters)
reads0=${1:-0} arena0=${2:-0}
check "-o no_local_io: 16 MiB in, dropped from the page cache, read back equal" sh -c \
  "dd if='$tmp/big' of='$mnt3/nolocal' bs=1M count=16 status=none && sync && echo 3 > /proc/sys/vm/drop_caches && head -c 16M '$tmp/big' | cmp - '$mnt3/nolocal'"
set -- $(io_counters)
check "-o no_local_io: no local reads, no arena writes (${reads0} ${arena0} -> ${1:-?} ${2:-?})" \
  test "${1:-x} ${2:-x}" = "$reads0 $arena0"
check "-o no_local_io: unmount" sh -c "rm '$mnt3/nolocal' && fusermount3 -u '$mnt3' && ! grep -q ' $mnt3 fuse.jobfs ' /proc/mounts"
# Cold reads: by default the mount reads chunk files not in the page cache with direct I/O,
# so reading a file back leaves its chunk files out of the page cache (the daemon's look at
# each checksum page excepted); -o no_direct_reads reads them through it.
chunk_cached_kib() { # FILE-ON-A-MOUNT: KiB of its chunk files in the page cache
  find "$dir"/data*/chunks -name "$(printf %016x "$(stat -c %i "$1")").*" -exec fincore -b -n -o RES {} + |
    awk '{ s += $1 } END { print int(s / 1024) }'
}
cold_read_cached() { # FILE-ON-A-MOUNT MIN-KIB MAX-KIB: its first 16 MiB read back cold equal to big's, and the
  # KiB of its chunk files then in the page cache within [MIN, MAX)
  sync && echo 3 > /proc/sys/vm/drop_caches && head -c 16M "$tmp/big" | timeout 60 cmp - "$1" || return 1
  kib=$(chunk_cached_kib "$1")
  echo "# $kib KiB of chunk files cached"
  [ "$kib" -ge "$2" ] && [ "$kib" -lt "$3" ]
}
check "cold reads: 16 MiB in" sh -c "dd if='$tmp/big' of='$mnt/direct' bs=1M count=16 status=none"
checkf "cold reads: read back direct and equal, the chunk files left out of the page cache" cold_read_cached "$mnt/direct" 0 1024
check "mount with -o no_direct_reads" sh -c "'$JOBFS_FUSE' -o cluster='$dir/cluster',no_direct_reads '$mnt3'"
checkf "-o no_direct_reads: read back equal through the chunk files' page cache" cold_read_cached "$mnt3/direct" 16384 1000000
check "-o no_direct_reads: unmount" sh -c "rm '$mnt/direct' && fusermount3 -u '$mnt3' && ! grep -q ' $mnt3 fuse.jobfs ' /proc/mounts"
# -o no_dir_delegation: files made in bulk are each the daemons' to make.
check "mount with -o no_dir_delegation" sh -c "'$JOBFS_FUSE' -o cluster='$dir/cluster',no_dir_delegation '$mnt3'"
deleg0=$(delegations)
check "-o no_dir_delegation: 200 files made in a directory, all there" sh -c "
  mkdir '$mnt3/nodeleg' && (cd '$mnt3/nodeleg' && seq 1 200 | xargs touch) && [ \$(ls '$mnt/nodeleg' | wc -l) -eq 200 ]"
check "-o no_dir_delegation: no directory was delegated ($deleg0 -> $(delegations))" test "$(delegations)" -eq "$deleg0"
check "-o no_dir_delegation: unmount" sh -c "rm -r '$mnt3/nodeleg' && fusermount3 -u '$mnt3' && ! grep -q ' $mnt3 fuse.jobfs ' /proc/mounts"

# A second file system on a 48 MiB disk, mounted through the helper: ENOSPC reaches the
# writer, what was written before stays; then its daemons are killed: calls fail promptly.
full=$tmp/full
mkdir "$full"
if mount -t tmpfs -o size=48m jobfs-fuse-test "$full"; then
  check "a small file system: local up" sh -c "'$JOBFS' local up -n 3 --dir '$full/c' > /dev/null"
  check "... mounted" sh -c "JOBFS_FUSE='$JOBFS_FUSE' '$MOUNT_HELPER' '$full/c/cluster' '$mnt3'"
  head -c 4000000 /dev/urandom > "$tmp/keep"
  check "... a file written before the disk fills" cp "$tmp/keep" "$mnt3/keep"
  check "dd of 100 MiB fails with 'No space left on device'" sh -c "
    ! dd if=/dev/zero of='$mnt3/big' bs=1M count=100 conv=fsync 2> '$tmp/dd.err' && grep -q 'No space left on device' '$tmp/dd.err'"
  check "... the earlier file reads back whole" cmp "$tmp/keep" "$mnt3/keep"
  check "... and after rm of the big file a new one fits" sh -c "rm -f '$mnt3/big' && head -c 8000000 /dev/zero > '$mnt3/after' && [ \$(stat -c %s '$mnt3/after') -eq 8000000 ]"
  for p in $(cat "$full/c/pids"); do kill -KILL "$p" 2>/dev/null; done
  check "daemons killed: a read fails within 40 s, with ENOTCONN or EIO, and does not hang" sh -c "
    start=\$(date +%s); ! timeout 60 cat '$mnt3/keep' > /dev/null 2> '$tmp/dead.err';
    end=\$(date +%s); [ \$((end - start)) -lt 40 ] && grep -Eq 'Transport endpoint is not connected|Input/output error|Connection' '$tmp/dead.err'"
  check "... and the mount still unmounts" sh -c "fusermount3 -u '$mnt3' || umount -l '$mnt3'"
  "$JOBFS" local down --dir "$full/c" > /dev/null 2>&1
  umount -l "$full"
else
  echo "not ok - a tmpfs for the small file system could not be mounted"
  fails=$((fails + 1))
fi

# The writeback cache (-o writeback_cache): the kernel buffers writes, and still flushes them
# at close, so the other mount (another node) sees them after it.
mntwb=$tmp/mntwb
mkdir "$mntwb"
check "writeback: mount with -o writeback_cache" sh -c "'$JOBFS_FUSE' -o cluster='$dir/cluster',writeback_cache '$mntwb'"
check "writeback: 64 MiB written and closed there read back byte-exact through the other mount" sh -c "
  head -c 64M /dev/urandom > '$tmp/wb.src' && cp '$tmp/wb.src' '$mntwb/wb' && cmp '$tmp/wb.src' '$mnt/wb' &&
  [ \$(stat -c %s '$mnt/wb') -eq 67108864 ]"
check "writeback: a partial write into a file opened write-only (the kernel reads the page first)" sh -c "
  printf 'hello world' > '$mntwb/pw' && printf 'HEL' | dd of='$mntwb/pw' bs=1 conv=notrunc 2>/dev/null &&
  [ \"\$(cat '$mnt/pw')\" = 'HELlo world' ]"
check "writeback: O_APPEND from 4 processes: 4 x 200 records, none torn or lost" sh -c "
  cd '$mntwb' && for w in 1 2 3 4; do (i=0; while [ \$i -lt 200 ]; do printf 'writer %s record %03d %s\n' \$w \$i 0123456789abcdefghijklmnopqrstuvwxyz >> appended; i=\$((i + 1)); done) & done; wait
  [ \$(wc -l < '$mnt/appended') -eq 800 ] && [ \$(grep -c '^writer [1-4] record [0-9][0-9][0-9] 0123456789abcdefghijklmnopqrstuvwxyz\$' '$mnt/appended') -eq 800 ] &&
  [ \$(sort -u '$mnt/appended' | wc -l) -eq 800 ]"
check "writeback: truncate and rewrite: the other mount sees the new size and bytes" sh -c "
  printf 'abcdef' > '$mntwb/tr' && truncate -s 2 '$mntwb/tr' && printf 'XY' >> '$mntwb/tr' && [ \"\$(cat '$mnt/tr')\" = 'abXY' ]"
check "writeback: unmount" sh -c "fusermount3 -u '$mntwb' && ! grep -q ' $mntwb fuse.jobfs ' /proc/mounts"

unmounted() { ! mounted "$1"; }
gone() { ! alive "$1"; }
kill -TERM "$pid1"
checkf "SIGTERM unmounts the foreground mount" wait_for 15 unmounted "$mnt"
checkf "... and ends its jobfs-fuse" wait_for 15 gone "$pid1"
wait "$pid1"
rc1=$?
pid1=
check "... and its exit status was 0" [ "$rc1" -eq 0 ]
pid2=$(pid_of_mount "$mnt2")
check "the daemonised jobfs-fuse is found" [ -n "$pid2" ]
check "fusermount3 -u unmounts the daemonised mount" sh -c "fusermount3 -u '$mnt2' && ! grep -q ' $mnt2 fuse.jobfs ' /proc/mounts"
checkf "... and ends its jobfs-fuse" wait_for 15 gone "$pid2"
check "nothing was logged as an error by the foreground mount" sh -c "! grep -q . '$tmp/fuse1.log' || { cat '$tmp/fuse1.log' >&2; false; }"
pids=$(tr "\n" " " < "$dir/pids")
check "local down" "$JOBFS" local down --dir "$dir"
check "no daemon left" sh -c "for p in $pids; do s=\$(awk '{print \$3}' /proc/\$p/stat 2>/dev/null); [ -z \"\$s\" ] || [ \"\$s\" = Z ] || exit 1; done"
echo "$fails failed"
[ "$fails" -eq 0 ]
