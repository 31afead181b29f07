#!/bin/sh
# c_api_test.sh: the C API from outside. libjobfs.so exports jobfs_* and nothing else (every
# function of jobfs.h among them); a C99 program built against jobfs.h (tests/unit/
# c_api_compile.c) connects through $JOBFS_CLUSTER to `jobfs local up` daemons and does a write
# and read round trip; `jobfs local down` leaves no daemon behind.
set -u
JOBFS=${JOBFS:-./client/jobfs}
export JOBFSD=${JOBFSD:-./server/jobfsd}
LIB=${LIBJOBFS:-./client/.libs/libjobfs.so}
HEADER=${srcdir:-.}/client/jobfs.h
dir=$(mktemp -d /tmp/jobfs-capi-XXXXXX)
rm -rf "$dir"
tmp=$(mktemp -d /tmp/jobfs-capi-files-XXXXXX)
. "$(dirname "$0")/lib.sh"
cleanup() { "$JOBFS" local down --dir "$dir" >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT

nm -D --defined-only "$LIB" | awk '{ print $NF }' | sort > "$tmp/exported"
# The functions jobfs.h declares: every "jobfs_name(" at the start of a declaration.
sed -n 's/^[a-z_ ]*[ *]\(jobfs_[a-z_]*\)(.*/\1/p' "$HEADER" | sort > "$tmp/declared"
check "libjobfs.so exports symbols" test -s "$tmp/exported"
check "every exported symbol is jobfs_*" sh -c "! grep -v '^jobfs_' '$tmp/exported'"
check "jobfs.h declares functions" test "$(wc -l < "$tmp/declared")" -ge 30
check "every function of jobfs.h is exported, and nothing else" cmp -s "$tmp/declared" "$tmp/exported"
check "the library has its soname" sh -c "objdump -p '$LIB' | grep -q 'SONAME *libjobfs.so.0'"

check "local up" sh -c "'$JOBFS' local up -n 3 --dir '$dir' > '$tmp/up.out'"
export JOBFS_CLUSTER=$dir/cluster
./tests/unit/c_api_compile > "$tmp/c99.out" 2>&1
rc=$?
cat "$tmp/c99.out"
check "the C99 program ran every step" test "$rc" -eq 0 -a "$(grep -c '^ok - ' "$tmp/c99.out")" -ge 20
check "a missing descriptor is a clear error" sh -c "JOBFS_CLUSTER=$tmp/nope ./tests/unit/c_api_compile 2>&1 | grep -q 'not ok - c99: connect.*$tmp/nope'"
pids=$(tr "\n" " " < "$dir/pids")
check "local down" "$JOBFS" local down --dir "$dir"
check "no daemon left" sh -c "for p in $pids; do s=\$(awk '{print \$3}' /proc/\$p/stat 2>/dev/null); [ -z \"\$s\" ] || [ \"\$s\" = Z ] || exit 1; done"
echo "$fails failed"
[ "$fails" -eq 0 ]
