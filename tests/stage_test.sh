#!/bin/sh
# stage_test.sh: jobfs stage-in / stage-out against a real S3 server that verifies SigV4
# (@20minutes/s3rver on 127.0.0.1, tests/helpers/s3rver.sh) and real jobfs daemons
# (jobfs local up). 1,000 small objects under nested prefixes and names with spaces and
# unicode, plus multipart objects; bytes compared on both sides (on the server through its
# on-disk store, independent of our client); wrong secret, missing bucket, an object deleted
# during staging, and the server killed in the middle of a stage-out (no false success, the
# data still in jobfs, a rerun resumes and completes it).
set -u
JOBFS=${JOBFS:-./client/jobfs}
export JOBFSD=${JOBFSD:-./server/jobfsd}
srcdir=${srcdir:-.}
. "$srcdir/tests/helpers/s3rver.sh"
fails=0
check() { # NAME CMD...: runs CMD, counts a failure if it fails
  name=$1; shift
  if "$@"; then echo "ok - $name"; else echo "not ok - $name"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d /tmp/jobfs-stage-XXXXXX)
dir=$tmp/cluster
cleanup() {
  s3rver_stop
  if [ "$fails" -gt 0 ]; then  # evidence for a failure: the daemons' state and logs
    "$JOBFS" status 2>&1 | sed 's/^/# /'
    for l in "$dir"/jobfsd.*.log; do [ -f "$l" ] && tail -n 15 "$l" | sed "s|^|# $(basename "$l"): |"; done
  fi
  "$JOBFS" local down --dir "$dir" >/dev/null 2>&1
  if [ -n "${JOBFS_TEST_KEEP:-}" ]; then echo "# kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

s3rver_start_free "$tmp/s3" || { echo "not ok - s3rver starts"; exit 1; }
port=$S3RVER_PORT
echo "ok - s3rver starts on 127.0.0.1:$port"
"$JOBFS" local up -n 3 --dir "$dir" > "$tmp/up.out" || { echo "not ok - local up"; exit 1; }
export JOBFS_CLUSTER=$dir/cluster
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_ENDPOINT_URL=http://127.0.0.1:$port
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_CA_BUNDLE AWS_REGION AWS_DEFAULT_REGION
J="$JOBFS"
S="--progress lines --progress-interval 2"
# curl signs with its own SigV4 code: an independent client for bucket creation and reads.
s3curl() { curl -sf --aws-sigv4 aws:amz:us-east-1:s3 --user S3RVER:S3RVER -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"; }
check "bucket created (curl --aws-sigv4)" s3curl -X PUT "http://127.0.0.1:$port/bkt"

# The data set: 1,000 small objects (1 byte to 16 KiB) in 30 nested directories, some named
# with spaces and unicode, an empty one, and two multipart objects (96 MiB and 40 MiB, parts
# of 8 MiB).
src=$tmp/src
python3 "$srcdir/tests/helpers/make_dataset.py" "$src" 7 1000 16384 "model weights.bin=96" "λ.tar=40"
nfiles=$(find "$src" -type f | wc -l)
check "1,003 source files" test "$nfiles" -eq 1003

# Local (parallel file system) → S3, checked on the server's own store.
check "stage-out of a local tree" sh -c "'$J' stage-out '$src' s3://bkt/data/ --part-size 8M --multipart-threshold 16M $S > '$tmp/out1' 2>'$tmp/err1'"
grep -q "1003 objects (1003 copied" "$tmp/out1" || { echo "not ok - summary counts 1003 copied"; cat "$tmp/out1" "$tmp/err1"; fails=$((fails + 1)); }
server_same() { # SRC_DIR PREFIX: every file of SRC_DIR byte-identical in s3rver's store
  (cd "$1" && find . -type f ! -name '.jobfs-stage-manifest*' | while IFS= read -r f; do
     cmp -s "$f" "$tmp/s3/bkt/$2/${f#./}._S3rver_object" || { echo "differs on the server: $f" >&2; exit 1; }
   done)
}
check "every object on the server is byte-identical" server_same "$src" data
check "a unicode multipart object reads back through curl" sh -c "s3curl() { curl -sf --aws-sigv4 aws:amz:us-east-1:s3 --user S3RVER:S3RVER -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \"\$@\"; }; s3curl -o '$tmp/lambda' 'http://127.0.0.1:$port/bkt/data/big/%CE%BB.tar' && cmp '$tmp/lambda' '$src/big/λ.tar'"
check "stage-out manifest on the server lists 1003 objects" sh -c "[ \$(grep -vc '^#' '$tmp/s3/bkt/data/.jobfs-stage-manifest._S3rver_object') -eq 1003 ]"

# S3 → jobfs, then jobfs → S3 (another prefix) and S3 → local: both directions through jobfs.
check "stage-in into jobfs" sh -c "'$J' stage-in s3://bkt/data/ jobfs:/in/ --part-size 8M $S > '$tmp/in1' 2>'$tmp/err2'"
grep -q "1003 objects (1003 copied" "$tmp/in1" || { echo "not ok - stage-in summary"; cat "$tmp/in1" "$tmp/err2"; fails=$((fails + 1)); }
check "progress lines on a non-tty" grep -q "^stage-in: .*objects" "$tmp/err2"
check "the last progress line is the finished transfer" sh -c "grep '^stage-in: ' '$tmp/err2' | tail -1 | grep -q '^stage-in: 100% 1003/1003 objects'"
check "the multipart object in jobfs is byte-exact (jobfs cp)" sh -c "'$J' cp 'jobfs:/in/big/model weights.bin' '$tmp/mw' && cmp '$tmp/mw' '$src/big/model weights.bin'"
check "a unicode small object in jobfs is byte-exact" sh -c "'$J' cp 'jobfs:/in/set 1/bêta/é-0001.bin' '$tmp/e1' && cmp '$tmp/e1' '$src/set 1/bêta/é-0001.bin'"
check "the manifest is in jobfs" sh -c "'$J' ls -a /in 2>/dev/null | grep -q jobfs-stage-manifest || '$J' ls /in | grep -q jobfs-stage-manifest"
check "stage-out from jobfs" sh -c "'$J' stage-out jobfs:/in s3://bkt/back --part-size 8M $S > '$tmp/out2' 2>&1"
check "jobfs → S3 objects byte-identical to the originals on the server" server_same "$src" back
check "stage-in to a local directory" sh -c "'$J' stage-in s3://bkt/back/ '$tmp/local' $S > '$tmp/in2' 2>&1"
check "local copy equals the source tree" diff -r -x '.jobfs-stage-manifest*' "$src" "$tmp/local"

# Resume: a second run finds everything complete and moves nothing.
check "stage-in again skips all (resume)" sh -c "'$J' stage-in s3://bkt/data/ jobfs:/in/ $S 2>&1 | grep -q '1003 objects (0 copied, 1003 skipped'"
check "stage-out again skips all (resume)" sh -c "'$J' stage-out jobfs:/in s3://bkt/back $S 2>&1 | grep -q '1003 objects (0 copied, 1003 skipped'"

# Several nodes: three ranks split the work, together they copy everything exactly once.
for r in 0 1 2; do
  "$J" stage-in s3://bkt/data/ jobfs:/ranks/ --rank $r --ranks 3 --progress none > "$tmp/rank$r" 2>&1 || echo "rank $r failed" >> "$tmp/rankfail"
done
check "three ranks succeed" test ! -e "$tmp/rankfail"
check "three ranks copy 1003 objects between them" sh -c "[ \$(cat '$tmp/rank0' '$tmp/rank1' '$tmp/rank2' | sed -n 's/.*: \([0-9]*\) objects (\([0-9]*\) copied.*/\2/p' | paste -sd+ | bc) -eq 1003 ]"
check "SLURM_NODEID/SLURM_NNODES give the same share as --rank/--ranks" sh -c "n=\$(sed -n 's/.*: \([0-9]*\) objects.*/: \1 objects/p' '$tmp/rank1'); [ -n \"\$n\" ] && SLURM_NODEID=1 SLURM_NNODES=3 '$J' stage-in s3://bkt/data/ jobfs:/ranks/ --progress none | grep -q -- \"\$n\""

# Errors: clear messages naming the S3 error, non-zero exit, nothing left behind as complete.
check "wrong secret: exit 1 naming SignatureDoesNotMatch" sh -c "AWS_SECRET_ACCESS_KEY=wrong '$J' stage-in s3://bkt/data/ jobfs:/bad/ 2>'$tmp/e'; [ \$? -eq 1 ] && grep -q 'stage-in from s3://bkt/data/ failed: 403 SignatureDoesNotMatch' '$tmp/e'"
check "wrong secret on stage-out: exit 1 naming SignatureDoesNotMatch" sh -c "AWS_SECRET_ACCESS_KEY=wrong '$J' stage-out '$src' s3://bkt/x/ 2>'$tmp/e'; [ \$? -eq 1 ] && grep -q 'stage-out to s3://bkt/x/ failed: 403 SignatureDoesNotMatch' '$tmp/e'"
check "missing bucket: exit 1 naming NoSuchBucket" sh -c "'$J' stage-in s3://nope/data/ jobfs:/bad/ 2>'$tmp/e'; [ \$? -eq 1 ] && grep -q '404 NoSuchBucket' '$tmp/e'"
check "no credentials: exit 1 saying where they were looked for" sh -c "env -u AWS_ACCESS_KEY_ID HOME=$tmp '$J' stage-in s3://bkt/data/ jobfs:/bad/ 2>'$tmp/e'; [ \$? -eq 1 ] && grep -q 'no S3 credentials' '$tmp/e'"
check "--part-size above 5 GiB is refused: exit 1, naming S3's limit, nothing copied" sh -c "'$J' stage-in s3://bkt/data/ jobfs:/bigpart/ --part-size 6G 2>'$tmp/e'; [ \$? -eq 1 ] && grep -q '5 GiB (S3.s largest part)' '$tmp/e' && ! '$J' stat /bigpart >/dev/null 2>&1"
check "bad S3 URL is refused" sh -c "'$J' stage-in s3:/bkt jobfs:/bad/ 2>'$tmp/e'; [ \$? -ne 0 ] && grep -q 's3://bucket' '$tmp/e'"

# A stage-in starts copying with the listing's first page (1000 keys), before the next is
# listed. A listing that breaks after that page (s3rver fails a listing over an object whose
# metadata is empty, as a kill mid-write leaves it; here the last file name of 1003, which
# s3rver may also leave out of the first page): exit 1 saying how far it got, no manifest,
# and the first page's objects are in place, so that the rerun (metadata mended) skips them.
check "upload 1003 objects for the paged listing" sh -c "'$J' stage-out '$src' s3://bkt/pages/ --progress none >/dev/null 2>&1"
last_meta=$(find "$tmp/s3/bkt/pages" -name '*._S3rver_metadata.json' | LC_ALL=C sort | tail -1)
cp "$last_meta" "$tmp/last_meta"
: > "$last_meta"
JOBFS_STAGE_TEST_PAUSE_AFTER_LIST_MS=1 "$J" stage-in s3://bkt/pages/ jobfs:/pages/ --retries 2 --progress none > "$tmp/p.out" 2> "$tmp/p.err"
check "a listing broken after its first page: exit 1" test $? -eq 1
check "the first page was planned before the next was listed" grep -q "stage-in: listed 1000 objects; pausing" "$tmp/p.err"
check "the message says where the listing stopped" grep -q "stage-in from s3://bkt/pages/ failed: the listing stopped after [0-9]* keys (.* objects copied or complete; run it again to resume): .*500 InternalError" "$tmp/p.err"
check "no manifest for the incomplete listing" sh -c "! '$J' stat /pages/.jobfs-stage-manifest >/dev/null 2>&1"
cp "$tmp/last_meta" "$last_meta"
check "the rerun completes" sh -c "'$J' stage-in s3://bkt/pages/ jobfs:/pages/ --progress none > '$tmp/p2.out' 2>&1"
check "the rerun skipped the first page's objects" sh -c "grep -Eq '1003 objects \([0-9]+ copied, (99[0-9]|100[0-3]) skipped as complete, 0 failed\)' '$tmp/p2.out' || { sed 's/^/# /' '$tmp/p.out' '$tmp/p.err' '$tmp/p2.out'; false; }"
check "and the manifest is there" sh -c "'$J' stat /pages/.jobfs-stage-manifest >/dev/null 2>&1"

# An object deleted between listing and copy: that object fails by name, the rest is copied,
# no manifest claims completeness.
check "upload a small set" sh -c "'$J' stage-out '$src/set 2' s3://bkt/del/ --progress none >/dev/null 2>&1"
victim=$(cd "$src/set 2" && ls alpha | sed -n 1p)
other=$(cd "$src/set 2" && ls alpha | sed -n 2p)
JOBFS_STAGE_TEST_PAUSE_AFTER_LIST_MS=3000 "$J" stage-in s3://bkt/del/ jobfs:/del/ --progress none > "$tmp/d.out" 2> "$tmp/d.err" &
stager=$!
# Once it says the listing is done (it then pauses 3 s): not after a fixed sleep, which a
# loaded machine's slow start lost (the object went before it was listed).
n=0
while ! grep -q 'listed .* pausing' "$tmp/d.err" 2>/dev/null && [ $n -lt 600 ]; do sleep 0.05; n=$((n + 1)); done
s3curl -X DELETE "http://127.0.0.1:$port/bkt/del/alpha/$(python3 -c 'import sys,urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$victim")" >/dev/null
wait $stager
check "object deleted during staging: exit 1" test $? -eq 1
check "the message names the object and NoSuchKey" grep -q "stage-in of s3://bkt/del/alpha/$victim failed: 404 NoSuchKey" "$tmp/d.err"
check "no file and no manifest for the incomplete copy" sh -c "! '$J' stat '/del/alpha/$victim' >/dev/null 2>&1 && ! '$J' stat /del/.jobfs-stage-manifest >/dev/null 2>&1"
check "the other objects were copied" sh -c "'$J' cp 'jobfs:/del/alpha/$other' '$tmp/o2' && cmp '$tmp/o2' '$src/set 2/alpha/$other'"

# A final name held by a directory in jobfs: the files are put in place by the batch (one
# rename request per directory's batch); the one that cannot be fails by name, its temporary
# file goes, the others of its batch are in place, and no manifest claims completeness.
third=$(cd "$src/set 2" && ls alpha | sed -n 3p)
"$J" mkdir -p "/clash/alpha/$other" > /dev/null
"$J" cp "$src/set 2/alpha/$third" "jobfs:/clash/alpha/$other/keep" > /dev/null
"$J" stage-in s3://bkt/del/ jobfs:/clash/ --progress none > "$tmp/c.out" 2> "$tmp/c.err"
check "a final name held by a directory: exit 1" test $? -eq 1
check "the message names the object and the directory in the way" grep -q "stage-in of s3://bkt/del/alpha/$other failed: rename jobfs:/clash/alpha/.*alpha/$other: .*directory" "$tmp/c.err"
check "no temporary file is left in its directory" sh -c "! '$J' ls -a /clash/alpha | grep -q jobfs-stage"
check "the directory in the way is untouched" sh -c "'$J' cp 'jobfs:/clash/alpha/$other/keep' '$tmp/k' && cmp '$tmp/k' '$src/set 2/alpha/$third'"
check "the other objects of the directory are in place, byte-exact" sh -c "'$J' cp 'jobfs:/clash/alpha/$third' '$tmp/o3' && cmp '$tmp/o3' '$src/set 2/alpha/$third' && [ \$('$J' ls /clash/alpha | wc -l) -eq \$(( \$(ls '$src/set 2/alpha' | wc -l) - 1 )) ]"
check "no manifest for the incomplete copy" sh -c "! '$J' stat /clash/.jobfs-stage-manifest >/dev/null 2>&1"

# A file that changes between its digest and its upload. Stage-out streams a file's PUT (or
# part) from the file in two passes: the digests, then the body as it is sent; the server's
# ETag (the MD5 of what it stored; s3rver does not check Content-MD5) must then differ from
# the declared MD5. One PUT of 8 MiB, and a multipart upload (12 MiB in 5 MiB parts): the
# test rewrites the file's first MiB during the pause after the first digest.
http_status() { curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 aws:amz:us-east-1:s3 --user S3RVER:S3RVER \
  -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$1"; }
changed_upload() { # NAME SIZE_MIB OPTIONS...
  what=$1 mib=$2; shift 2
  mkdir -p "$tmp/chg-$what"
  head -c $((mib << 20)) /dev/urandom > "$tmp/chg-$what/f"
  # Each run its own, absent, stderr file: the previous run's "pausing" line, read before this
  # stager's redirection truncated the file, made the loop below end at once, and the file
  # was rewritten before its digest (the multipart case then passed its upload: seen in CI).
  err="$tmp/chg-$what.err"
  rm -f "$err"
  JOBFS_STAGE_TEST_PAUSE_AFTER_DIGEST_MS=1500 "$J" stage-out "$tmp/chg-$what" "s3://bkt/chg-$what/" --parallel 1 \
    --progress none "$@" > "$tmp/chg.out" 2> "$err" &
  stager=$!
  n=0
  while ! grep -q 'digested .* pausing' "$err" 2>/dev/null && [ $n -lt 600 ]; do sleep 0.05; n=$((n + 1)); done
  dd if=/dev/urandom of="$tmp/chg-$what/f" bs=1M count=1 conv=notrunc status=none
  wait $stager
  check "$what changed after its digest: exit 1" test $? -eq 1
  check "$what changed after its digest: the message says the bytes differ" grep -q "chg-$what/f failed: .*is not the MD5 of the bytes sent" "$err"
  check "$what changed after its digest: no object under the name (404)" test "$(http_status "http://127.0.0.1:$port/bkt/chg-$what/f")" = 404
}
changed_upload one-put 8
changed_upload multipart 12 --part-size 5M --multipart-threshold 5M

# The server killed in the middle of a stage-out from jobfs: exit 1, no manifest, the data
# still in jobfs; after a restart a rerun resumes (skips what is there) and completes.
"$J" stage-out jobfs:/in s3://bkt/kill/ --part-size 8M --parallel 2 --retries 2 --progress none > "$tmp/k.out" 2> "$tmp/k.err" &
stager=$!
i=0
# Wait (up to 2 minutes on a loaded machine) until 100 objects are on the server, then kill it.
until [ "$(find "$tmp/s3/bkt/kill" -name '*._S3rver_metadata.json' 2>/dev/null | wc -l)" -ge 100 ] || [ $i -ge 2400 ]; do sleep 0.05; i=$((i + 1)); done
s3rver_stop
echo "# killed the server with $(find "$tmp/s3/bkt/kill" -name '*._S3rver_metadata.json' 2>/dev/null | wc -l) objects stored"
wait $stager
check "server killed mid-stage-out: exit 1" test $? -eq 1
check "the failure names objects and the connection error" grep -q "stage-out of jobfs:/in/.* failed: .*\(onnect\|refused\|reset\|closed\|Failure\)" "$tmp/k.err"
check "no success reported: the summary counts failures" grep -q ' [1-9][0-9]* failed)' "$tmp/k.out"
check "no manifest on the server" test ! -e "$tmp/s3/bkt/kill/.jobfs-stage-manifest._S3rver_object"
check "the data is still in jobfs" sh -c "'$J' cp 'jobfs:/in/big/model weights.bin' '$tmp/mw2' && cmp '$tmp/mw2' '$src/big/model weights.bin'"
s3rver_start "$tmp/s3" "$port" || echo "not ok - s3rver restarts"
grep -q ' [1-9][0-9]* failed)' "$tmp/k.out" || { echo "# the stage-out's output:"; sed 's/^/# /' "$tmp/k.out"; head -n 5 "$tmp/k.err" | sed 's/^/# /'; }
# As a kill mid-write can leave it (s3rver rewrites metadata in place): one object's metadata
# empty, which fails the server's whole listing; the resume must still skip the intact ones.
: > "$(find "$tmp/s3/bkt/kill" -name '*._S3rver_metadata.json' | head -1)"
check "after a restart, the rerun completes" sh -c "'$J' stage-out jobfs:/in s3://bkt/kill/ --part-size 8M --progress none > '$tmp/k2.out' 2>&1"
check "the rerun skipped what was already there" sh -c "grep -q '1003 objects (.* copied, [1-9][0-9]* skipped as complete, 0 failed)' '$tmp/k2.out'"
check "after the resume every object is byte-identical on the server" server_same "$src" kill
check "and the manifest is there" test -e "$tmp/s3/bkt/kill/.jobfs-stage-manifest._S3rver_object"

[ "$fails" -eq 0 ]
