#!/bin/sh
# cli_test.sh: the jobfs tool end to end against real daemons: local up, namespace commands,
# cp in and out (bytes compared), the checkpoint job, errors with their exit codes, local down
# leaving no daemon and no directory behind.
set -u
JOBFS=${JOBFS:-./client/jobfs}
export JOBFSD=${JOBFSD:-./server/jobfsd}
dir=$(mktemp -d /tmp/jobfs-cli-XXXXXX)
rm -rf "$dir"
tmp=$(mktemp -d /tmp/jobfs-cli-files-XXXXXX)
. "$(dirname "$0")/lib.sh"
cleanup() { "$JOBFS" local down --dir "$dir" >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT

check "local up" sh -c "'$JOBFS' local up -n 3 --dir '$dir' > '$tmp/up.out'"
grep -q "export JOBFS_CLUSTER=$dir/cluster" "$tmp/up.out" || { echo "not ok - export line"; fails=$((fails + 1)); }
export JOBFS_CLUSTER=$dir/cluster
check "a second local up in the same place is refused" sh -c "! '$JOBFS' local up --dir '$dir' 2>/dev/null"
check "status lists three daemons" sh -c "[ \$('$JOBFS' status | grep -c 127.0.0.1) -eq 3 ]"
check "status --idle-check gives each daemon's CPU and heartbeat rate" sh -c "[ \$('$JOBFS' status --idle-check=1 | grep -c 'cpu *[0-9.]* %.*heartbeats sent [0-9.]*/s') -eq 3 ]"
check "mkdir -p" "$JOBFS" mkdir -p /x/y/z
head -c 5000000 /dev/urandom > "$tmp/in"
check "cp in" "$JOBFS" cp "$tmp/in" jobfs:/x/y/z/file
check "ls -l shows the size" sh -c "'$JOBFS' ls -l /x/y/z | grep -q ' 5000000 file'"
check "cp out" "$JOBFS" cp jobfs:/x/y/z/file "$tmp/out"
check "same bytes" cmp "$tmp/in" "$tmp/out"
# cp sizes its buffer to the file: a 64 KiB file once took a zeroed 64 MiB buffer (84 MB peak
# RSS against 19 MB now; 0.43 s per small file here, two thirds of it memset and page faults). Measured against the peak
# RSS of `jobfs ls /` (the sanitizer build's is larger): cp may add 16 MiB to it, not 64.
peak_kib() { # CMD...: runs it; its peak RSS in KiB (getrusage of the child), -1 if it failed
  python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if r == 0 else -1)' "$@"
}
small_cp() { # SRC DST: cp, its peak RSS within 16 MiB of ls's
  base=$(peak_kib "$JOBFS" ls /) k=$(peak_kib "$JOBFS" cp "$1" "$2")
  echo "# jobfs cp $1 $2: peak RSS $k KiB (jobfs ls: $base KiB)"
  [ "$base" -gt 0 ] && [ "$k" -gt 0 ] && [ "$k" -lt $((base + 16384)) ]
}
head -c 65536 /dev/urandom > "$tmp/small"
check "cp of a 64 KiB file in: peak RSS within 16 MiB of ls's" small_cp "$tmp/small" jobfs:/small
check "cp of it out: the same, and the same bytes" eval 'small_cp jobfs:/small "$tmp/small.out" && cmp "$tmp/small" "$tmp/small.out"'
check "stat of a missing path fails with exit 1" sh -c "'$JOBFS' stat /nope 2>'$tmp/err'; [ \$? -eq 1 ] && grep -q 'not_found\|no such\|stat /nope' '$tmp/err'"
check "mkdir of an existing directory fails" sh -c "! '$JOBFS' mkdir /x 2>/dev/null"
check "rm of a non-empty directory needs -r" sh -c "! '$JOBFS' rm /x 2>/dev/null"
check "unknown command exits 2" sh -c "'$JOBFS' frobnicate 2>/dev/null; [ \$? -eq 2 ]"
check "cp --buffer-mib 0 is refused (exit 2) before any daemon is asked" sh -c "JOBFS_CLUSTER=/nonexistent '$JOBFS' cp --buffer-mib 0 '$tmp/in' jobfs:/b0 2>'$tmp/err'; [ \$? -eq 2 ] && grep -q 'buffer-mib must be at least 1' '$tmp/err'"
check "cp needs exactly one jobfs side" sh -c "'$JOBFS' cp '$tmp/in' '$tmp/x' 2>/dev/null; [ \$? -eq 2 ]"
check "ckpt verifies and reports both figures" sh -c "'$JOBFS' ckpt -p 2 --block-mib 8 --local-dir '$tmp' > '$tmp/ckpt' && grep -q 'verified 16777216 bytes' '$tmp/ckpt' && grep -q '^bench ckpt-write: jobfs' '$tmp/ckpt'"
check "ckpt larger than memory: a clear error, no files" sh -c "! '$JOBFS' ckpt -p 2 --block-mib 100000000 --path /toobig --local-dir '$tmp' > '$tmp/ckpt' 2> '$tmp/ckpt.err' && grep -q 'does not fit in memory' '$tmp/ckpt.err' && ! '$JOBFS' stat /toobig > /dev/null 2>&1"
check "ckpt --strided verifies" sh -c "'$JOBFS' ckpt --strided -p 4 --block-mib 8 --local-dir '$tmp' > '$tmp/ckpt' && grep -q 'verified 33554432 bytes' '$tmp/ckpt' && grep -q '^bench ckpt-strided-write: jobfs' '$tmp/ckpt'"
# The issue's cases: 8 processes writing disjoint regions of one 1 GiB file, byte-exact
# read-back (about 10 s here), and 8 processes each writing every 8th MiB of a 256 MiB file.
check "8 processes write disjoint regions of one 1 GiB file, read back byte-exact" sh -c "'$JOBFS' ckpt -p 8 --block-mib 128 --local-dir '$tmp' > '$tmp/ckpt' && grep -q 'verified 1073741824 bytes' '$tmp/ckpt'"
check "8 processes each write every 8th MiB of a 256 MiB file, read back byte-exact" sh -c "'$JOBFS' ckpt --strided --stride-mib 1 -p 8 --block-mib 32 --local-dir '$tmp' > '$tmp/ckpt' && grep -q 'every 8-th 1 MiB piece' '$tmp/ckpt' && grep -q 'verified 268435456 bytes' '$tmp/ckpt'"
check "layout shows chunk size, stripe count and the daemons of a file" sh -c "'$JOBFS' layout /x/y/z/file > '$tmp/lay' && grep -q '^chunk size: 4M' '$tmp/lay' && grep -q '^stripe count: 0 (all 3 daemons)' '$tmp/lay' && [ \$(grep -c '^  daemon [0-2] 127.0.0.1' '$tmp/lay') -eq 3 ]"
check "layout set on a directory" sh -c "'$JOBFS' mkdir /lay && '$JOBFS' layout /lay --chunk-size 1M --stripe-count 2 | grep -q '^stripe count: 2'"
check "a new file inherits the directory's layout" sh -c "'$JOBFS' cp '$tmp/in' jobfs:/lay/f && '$JOBFS' layout /lay/f > '$tmp/lay' && grep -q '^chunk size: 1M' '$tmp/lay' && grep -q '^stripe count: 2' '$tmp/lay' && grep -q '^size: 5000000 bytes in 5 chunks' '$tmp/lay' && [ \$(grep -c '^  daemon ' '$tmp/lay') -eq 2 ]"
check "layout of a non-empty file cannot change (exit 1)" sh -c "'$JOBFS' layout /lay/f --chunk-size 2M 2>'$tmp/err'; [ \$? -eq 1 ] && grep -q 'layout can only change while the file is empty' '$tmp/err'"
check "layout with a bad size exits 2" sh -c "'$JOBFS' layout /lay --chunk-size 12Q 2>/dev/null; [ \$? -eq 2 ]"
check "rm -r" "$JOBFS" rm -r /x
check "rm -r of the layout directory" "$JOBFS" rm -r /lay
check "rm of a file" "$JOBFS" rm /small
check "the tree is gone" sh -c "[ -z \"\$('$JOBFS' ls /)\" ]"
pids=$(tr "\n" " " < "$dir/pids")
check "local down" "$JOBFS" local down --dir "$dir"
check "no daemon left" sh -c "for p in $pids; do s=\$(awk '{print \$3}' /proc/\$p/stat 2>/dev/null); [ -z \"\$s\" ] || [ \"\$s\" = Z ] || exit 1; done"
check "no directory left" test ! -e "$dir"
echo "$fails failed"
[ "$fails" -eq 0 ]
