#!/bin/sh
# stage_rgw_test.sh: the acceptance tier of jobfs stage-in / stage-out, against Ceph radosgw
# on a one-mon, one-OSD cluster on 127.0.0.1 (tests/helpers/rgw.sh) and real jobfs daemons
# (jobfs local up). radosgw checks what s3rver does not: the body against the signed
# x-amz-content-sha256, multipart rules (EntityTooSmall, ETag "…-N", ListParts, Abort).
# Two 256 MiB objects (multipart, parallel parts) and 300 small ones under nested prefixes
# with spaces and unicode: stage-out, read back with curl's own SigV4 signer and compared,
# stage-in into jobfs and compared; wrong secret, missing bucket; radosgw's payload-hash
# check seen passing for our PUTs and parts; a part size below 5 MiB; a part refused by a
# quota aborts its upload; radosgw killed in the middle of a stage-out, restarted, the rerun
# resumes and aborts the uploads the killed run left open. Needs root (the mini-cluster) and
# the Ceph packages of scripts/install-deps; skips itself otherwise.
set -u
JOBFS=${JOBFS:-./client/jobfs}
export JOBFSD=${JOBFSD:-./server/jobfsd}
srcdir=${srcdir:-.}
. "$srcdir/tests/lib.sh"
. "$srcdir/tests/helpers/rgw.sh"
if [ "$(id -u)" -ne 0 ]; then echo "ok - # SKIP not root (the Ceph mini-cluster runs as root)"; exit 0; fi
if [ -n "$(rgw_missing)" ]; then echo "ok - # SKIP Ceph not installed ($(rgw_missing | sed "s/ *$//")): scripts/install-deps installs it"; exit 0; fi

tmp=$(mktemp -d /tmp/jobfs-rgw-XXXXXX)
dir=$tmp/cluster
# 20 ports per run, below the ephemeral range: 20000..29999, apart from s3rver's
# (42000..44999) and Slurm's (6927, 7200..7999); two runs collide only if $$ % 500 agree,
# and then rgw_start says the ports are taken.
port=$((20000 + ($$ % 500) * 20))
cleanup() {
  rgw_stop
  if [ "$fails" -gt 0 ]; then
    for l in "$RGW_DIR/log/rgw.log" "$dir"/jobfsd.*.log; do [ -f "$l" ] && tail -n 15 "$l" | sed "s|^|# $(basename "$l"): |"; done
  fi
  "$JOBFS" local down --dir "$dir" >/dev/null 2>&1
  if [ -n "${JOBFS_TEST_KEEP:-}" ]; then echo "# kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

t0=$(date +%s)
rgw_start "$tmp/rgw" "$port" || { echo "not ok - radosgw mini-cluster starts"; exit 1; }
echo "ok - radosgw mini-cluster starts on 127.0.0.1:$port ($(($(date +%s) - t0)) s)"
"$JOBFS" local up -n 3 --dir "$dir" > "$tmp/up.out" || { echo "not ok - local up"; cat "$tmp/up.out"; exit 1; }
export JOBFS_CLUSTER=$dir/cluster
EP=http://127.0.0.1:$port
export AWS_ACCESS_KEY_ID=$RGW_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$RGW_SECRET_KEY AWS_ENDPOINT_URL=$EP
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_CA_BUNDLE AWS_REGION AWS_DEFAULT_REGION
J=$(cd "$(dirname "$JOBFS")" && pwd)/$(basename "$JOBFS")  # absolute: some checks run in the source tree
# curl signs with libcurl's own SigV4 code: an independent client to create buckets and read
# objects back. UNSIGNED-PAYLOAD: curl does not hash the body itself.
s3curl() { curl -sS -f --aws-sigv4 aws:amz:us-east-1:s3 --user "$RGW_ACCESS_KEY:$RGW_SECRET_KEY" \
             -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"; }
lacks() { # PATTERN URL: the server answers URL (a listing) and the answer lacks PATTERN
  out=$(s3curl "$2") || return 1
  ! printf '%s' "$out" | grep -q "$1"
}
absent() { # URL: HEAD answers 404
  [ "$(curl -s -I -o /dev/null -w '%{http_code}' --aws-sigv4 aws:amz:us-east-1:s3 --user "$RGW_ACCESS_KEY:$RGW_SECRET_KEY" \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$1")" = 404 ]
}
enc() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$1"; }
seen=0
at() { echo "# $(($(date +%s) - t0)) s: $1"; }
shown() { # FILE...: the files that explain the check just failed (nothing if it passed)
  [ "$fails" -gt "$seen" ] && sed 's/^/# /' "$@"
  seen=$fails
}
check "bucket created (curl --aws-sigv4)" s3curl -X PUT "$EP/bkt"

# The data set: 300 small objects (1 byte to 64 KiB) in 30 nested directories, some named with
# spaces, accents, Greek and CJK, an empty one, and two 256 MiB objects.
src=$tmp/src
python3 "$srcdir/tests/helpers/make_dataset.py" "$src" 11 300 65536 "model weights.bin=256" "λ ckpt.tar=256"
at "data set written"
check "303 source files" test "$(find "$src" -type f | wc -l)" -eq 303

# Local → radosgw with the defaults: files above 64 MiB go up in 16 MiB parts, 8 in flight.
check "stage-out of 303 objects to radosgw" sh -c "'$J' stage-out '$src' s3://bkt/data/ --progress none > '$tmp/out1' 2>'$tmp/err1'"
check "summary: 303 copied, 0 failed" grep -q "303 objects (303 copied, 0 skipped as complete, 0 failed)" "$tmp/out1"
shown "$tmp/out1" "$tmp/err1"
# Every object read back by curl and compared with its source file.
at "stage-out done"
# Every object read back by curl (one process, one GET per object) and compared with its
# source file.
server_same() { # SRC_DIR PREFIX
  rm -rf "$tmp/back" && mkdir "$tmp/back" || return 1
  python3 - "$1" "$EP/bkt/$2" "$tmp/back" > "$tmp/back.cfg" <<'PY' || return 1
import os, sys, urllib.parse
src, base, out = sys.argv[1:]
for n, rel in enumerate(sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)):
    print('url = "%s/%s"\noutput = "%s/%d"' % (base, urllib.parse.quote(rel), out, n))
PY
  s3curl -K "$tmp/back.cfg" 2>"$tmp/back.err" || { sed 's/^/# /' "$tmp/back.err"; return 1; }
  python3 - "$1" "$tmp/back" <<'PY'
import filecmp, os, sys
src, back = sys.argv[1:]
rels = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
bad = [r for n, r in enumerate(rels) if not filecmp.cmp(os.path.join(src, r), os.path.join(back, str(n)), shallow=False)]
for r in bad[:10]:
    print("# differs on the server: " + r)
sys.exit(1 if bad or not rels else 0)
PY
}
check "every object on radosgw is byte-identical (GET by curl)" server_same "$src" data
etag_of() { # KEY (encoded): the object's ETag, as radosgw reports it to HEAD, unquoted
  s3curl -I "$EP/bkt/$1" | tr -d '\r"' | sed -n 's/^[Ee][Tt][Aa][Gg]: *//p'
}
big1=$(etag_of "data/big/$(enc 'model weights.bin')")
big2=$(etag_of "data/big/$(enc 'λ ckpt.tar')")
echo "# ETags of the 256 MiB objects: $big1 $big2"
ends_in() { case $1 in *"$2") return 0;; esac; return 1; }
check "the 256 MiB objects were uploaded in 16 parts (ETags …-16)" eval 'ends_in "$big1" -16 && ends_in "$big2" -16' 
check "a small object's ETag is its MD5 (one PUT)" sh -c \
  "[ \"\$(md5sum < '$src/set 1/bêta/é-0001.bin' | cut -c1-32)\" = '$(etag_of "data/$(enc 'set 1/bêta/é-0001.bin')")' ]"
check "no multipart upload left open" lacks '<Upload>' "$EP/bkt?uploads="
# Resume reads x-amz-meta-jobfs-* by HEAD: radosgw keeps them for multipart objects too.
check "stage-out again skips all 303, the multipart objects too" sh -c "'$J' stage-out '$src' s3://bkt/data/ --progress none 2>&1 | grep -q '303 objects (0 copied, 303 skipped'"

at "compared on the server"
# radosgw → jobfs: ranged GETs of the large objects with If-Match, compared through jobfs cp.
check "stage-in into jobfs" sh -c "'$J' stage-in s3://bkt/data/ jobfs:/in/ --progress none > '$tmp/in1' 2>'$tmp/err2'"
check "stage-in summary: 303 copied" grep -q "303 objects (303 copied, 0 skipped as complete, 0 failed)" "$tmp/in1"
shown "$tmp/in1" "$tmp/err2"
jobfs_same() { # SRC_DIR JOBFS_DIR: every file byte-identical in jobfs
  (cd "$1" && find . -type f | while IFS= read -r f; do
     "$J" cp "jobfs:$2/${f#./}" "$tmp/j" 2>"$tmp/j.err" && cmp -s "$tmp/j" "$f" && continue
     echo "# differs in jobfs: ${f#./}: $(cat "$tmp/j.err") $(cmp "$tmp/j" "$f" 2>&1) (source $(stat -c %s "$f") bytes, copy $(stat -c %s "$tmp/j") bytes)"
     "$J" cp "jobfs:$2/${f#./}" "$tmp/j" 2>&1 | sed 's/^/# again: /'
     cmp "$tmp/j" "$f" 2>&1 | sed 's/^/# read again: /'
     "$J" stat "$2/${f#./}" 2>&1 | sed 's/^/# /'
     exit 1
   done)
}
check "every file in jobfs is byte-identical to its source" jobfs_same "$src" /in
at "stage-in done and compared"
check "stage-in again skips all (resume by ETag)" sh -c "'$J' stage-in s3://bkt/data/ jobfs:/in/ --progress none 2>&1 | grep -q '303 objects (0 copied, 303 skipped'"

# Errors: the S3 code reaches the user, the exit status is 1.
check "wrong secret on stage-in: exit 1 naming SignatureDoesNotMatch" sh -c "AWS_SECRET_ACCESS_KEY=wrong '$J' stage-in s3://bkt/data/ jobfs:/bad/ 2>'$tmp/e'; [ \$? -eq 1 ] && grep -q 'stage-in from s3://bkt/data/ failed: 403 SignatureDoesNotMatch' '$tmp/e'"
check "wrong secret on stage-out: exit 1 naming SignatureDoesNotMatch" sh -c "AWS_SECRET_ACCESS_KEY=wrong '$J' stage-out '$src/set 3' s3://bkt/bad/ 2>'$tmp/e'; [ \$? -eq 1 ] && grep -q 'stage-out to s3://bkt/bad/ failed: 403 SignatureDoesNotMatch' '$tmp/e'"
check "missing bucket on stage-in: exit 1 naming NoSuchBucket" sh -c "'$J' stage-in s3://nope/data/ jobfs:/bad/ 2>'$tmp/e'; [ \$? -eq 1 ] && grep -q 'failed: 404 NoSuchBucket' '$tmp/e'"
check "missing bucket on stage-out: exit 1 naming NoSuchBucket" sh -c "'$J' stage-out '$src/set 3' s3://nope/x/ 2>'$tmp/e'; [ \$? -eq 1 ] && grep -q 'failed: 404 NoSuchBucket' '$tmp/e'"
check "nothing was written under bad/" lacks '<Key>' "$EP/bkt?list-type=2&prefix=bad%2F"

# The payload hash. radosgw refuses a body whose SHA-256 differs from the signed
# x-amz-content-sha256 (the control below, by curl). Our client signs the body's hash for
# every request, never UNSIGNED-PAYLOAD: with debug_rgw 20 radosgw logs the canonical request
# it verified, whose last line is that hash; for a one-PUT file and for each part of a
# multipart file (12 MiB in parts of 5 MiB, the smallest allowed: 5 + 5 + 2) it must be the
# SHA-256 of those bytes.
head -c 123457 /dev/urandom > "$tmp/hash-small"
head -c $((12 << 20)) /dev/urandom > "$tmp/hash-multi"
check "control: radosgw refuses a body that does not match x-amz-content-sha256" sh -c \
  "curl -s -o '$tmp/ctl' -w '%{http_code}' --aws-sigv4 aws:amz:us-east-1:s3 --user '$RGW_ACCESS_KEY:$RGW_SECRET_KEY' -H 'x-amz-content-sha256: $(printf x | sha256sum | cut -c1-64)' -T '$tmp/hash-small' '$EP/bkt/ctl' | grep -q 400 && grep -q XAmzContentSHA256Mismatch '$tmp/ctl'"
log=$RGW_DIR/log/rgw.log
mark=$(wc -l < "$log")
rgw_debug 20
check "stage-out of a one-PUT file and a 3-part file (--part-size 5M)" sh -c \
  "'$J' stage-out '$tmp/hash-small' s3://bkt/hash/small --progress none >/dev/null 2>'$tmp/e' && '$J' stage-out '$tmp/hash-multi' s3://bkt/hash/multi --part-size 5M --multipart-threshold 5M --progress none >/dev/null 2>>'$tmp/e'"
shown "$tmp/e"
rgw_debug 1/5
tail -n +"$mark" "$log" > "$tmp/hashlog"
# The canonical request spans several log lines; its payload hash is a line of its own.
grep -xE '[0-9a-f]{64}|UNSIGNED-PAYLOAD|STREAMING-[A-Z0-9-]*' "$tmp/hashlog" | sort -u > "$tmp/signed"
echo "# radosgw verified $(wc -l < "$tmp/signed") distinct payload hashes"
part_hash() { dd if="$tmp/hash-multi" bs=1M skip="$1" count="$2" 2>/dev/null | sha256sum | cut -c1-64; }
check "radosgw verified the body hash of the one-PUT file" grep -qx "$(sha256sum < "$tmp/hash-small" | cut -c1-64)" "$tmp/signed"
check "radosgw verified the body hash of each of the 3 parts" sh -c \
  "grep -qx '$(part_hash 0 5)' '$tmp/signed' && grep -qx '$(part_hash 5 5)' '$tmp/signed' && grep -qx '$(part_hash 10 2)' '$tmp/signed'"
check "no request of ours was UNSIGNED-PAYLOAD or streaming" sh -c "! grep -q 'UNSIGNED\|STREAMING' '$tmp/signed'"
three_parts() { ends_in "$(etag_of hash/multi)" -3 && s3curl -o "$tmp/m" "$EP/bkt/hash/multi" && cmp "$tmp/m" "$tmp/hash-multi"; }
check "the 3-part object has ETag …-3 and reads back intact" three_parts

# A part size below 5 MiB: radosgw (as AWS) would accept each part and refuse only the
# completion (EntityTooSmall), after the whole upload. The tool refuses the option before it
# sends anything: exit 2 or 1, the 5 MiB rule named, no object, no multipart upload left.
"$J" stage-out "$tmp/hash-multi" s3://bkt/small-parts/multi --part-size 1M --multipart-threshold 1M --progress none > "$tmp/sp.out" 2> "$tmp/sp.err"
sp=$?
check "--part-size 1M on stage-out is refused (exit $sp)" test "$sp" -ne 0
check "the message names the 5 MiB minimum" grep -q "5 MiB" "$tmp/sp.err"
check "no object and no open multipart upload after the refusal" eval \
  'lacks "<Key>" "$EP/bkt?list-type=2&prefix=small-parts%2F" && lacks small-parts "$EP/bkt?uploads="' 
too_small_refused() { # CreateMultipartUpload, two 1 MiB parts, Complete (then Abort), by curl
  id=$(s3curl -X POST "$EP/bkt/ctl-small?uploads=" | sed -n 's/.*<UploadId>\([^<]*\)<.*/\1/p')
  [ -n "$id" ] || return 1
  head -c 1048576 /dev/zero > "$tmp/p1"
  e1=$(s3curl -T "$tmp/p1" -D - -o /dev/null "$EP/bkt/ctl-small?partNumber=1&uploadId=$id" | tr -d '\r' | sed -n 's/^[Ee][Tt][Aa][Gg]: *//p')
  e2=$(s3curl -T "$tmp/p1" -D - -o /dev/null "$EP/bkt/ctl-small?partNumber=2&uploadId=$id" | tr -d '\r' | sed -n 's/^[Ee][Tt][Aa][Gg]: *//p')
  body="<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>$e1</ETag></Part><Part><PartNumber>2</PartNumber><ETag>$e2</ETag></Part></CompleteMultipartUpload>"
  r=$(curl -s --aws-sigv4 aws:amz:us-east-1:s3 --user "$RGW_ACCESS_KEY:$RGW_SECRET_KEY" \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -X POST --data "$body" "$EP/bkt/ctl-small?uploadId=$id")
  s3curl -X DELETE "$EP/bkt/ctl-small?uploadId=$id" >/dev/null
  echo "$r" | grep -q '<Code>EntityTooSmall</Code>' || { echo "# completion answered: $r"; return 1; }
}
check "control: radosgw refuses 1 MiB non-final parts at completion (EntityTooSmall)" too_small_refused

# A part the server refuses (a bucket quota of 10 MiB, below one 16 MiB part: 403
# QuotaExceeded; the 8 MiB last part fits and may be stored): the object fails by name and
# part, exit 1, and the upload is aborted (radosgw lists it as open otherwise).
check "bucket with a 10 MiB quota" eval 's3curl -X PUT "$EP/quota" && radosgw-admin -c "$RGW_DIR/ceph.conf" quota set --quota-scope=bucket --bucket=quota --max-size=10485760 >/dev/null 2>&1 && radosgw-admin -c "$RGW_DIR/ceph.conf" quota enable --quota-scope=bucket --bucket=quota >/dev/null 2>&1'
head -c $((40 << 20)) /dev/urandom > "$tmp/q40"
"$J" stage-out "$tmp/q40" s3://quota/q40 --part-size 16M --multipart-threshold 16M --parallel 3 --progress none > "$tmp/q.out" 2> "$tmp/q.err"
check "a part refused by the server: exit 1" test $? -eq 1
check "the message names the object, the part and QuotaExceeded" grep -q "stage-out of $tmp/q40 failed: part [0-9]*: 403 QuotaExceeded" "$tmp/q.err"
shown "$tmp/q.out" "$tmp/q.err"
check "the multipart upload was aborted: none open, no object" eval 'lacks "<Upload>" "$EP/quota?uploads=" && lacks "<Key>" "$EP/quota?list-type=2"'

at "error cases done"
# radosgw killed (SIGKILL) in the middle of a stage-out, while a multipart upload has parts
# stored and at least one object is complete: exit 1, no manifest; restarted, the rerun skips
# exactly the objects that were complete and finishes the rest.
listed() { s3curl "$EP/bkt?list-type=2&prefix=$1" | grep -o '<Key>' | wc -l; }
parts_stored() { # prints yes if an open upload under resume/ has a part stored (ListParts)
  s3curl "$EP/bkt?prefix=resume%2F&uploads=" 2>/dev/null | python3 -c '
import re, sys, urllib.parse
for k, i in re.findall(r"<Upload>.*?<Key>(.*?)</Key>.*?<UploadId>(.*?)</UploadId>", sys.stdin.read()):
    print(urllib.parse.quote(k) + "?uploadId=" + urllib.parse.quote(i, safe=""))' | while read -r q; do
    s3curl "$EP/bkt/$q" 2>/dev/null | grep -q '<Part>' && { echo yes; break; }
  done
}
"$J" stage-out "$src" s3://bkt/resume/ --parallel 2 --retries 2 --progress none > "$tmp/k.out" 2> "$tmp/k.err" &
stager=$!
t1=$(date +%s)
i=0
until { [ "$(listed resume%2F)" -ge 1 ] && [ -n "$(parts_stored)" ]; } || [ $i -ge 600 ] || ! kill -0 $stager 2>/dev/null; do
  sleep 0.2; i=$((i + 1))
done
rgw_gateway_kill
echo "# killed radosgw after $(($(date +%s) - t1)) s"
wait $stager
check "radosgw killed mid-stage-out: exit 1" test $? -eq 1
check "the failure names objects and the connection error" grep -q "stage-out of $src/.* failed: .*\(onnect\|refused\|reset\|closed\|Failure\)" "$tmp/k.err"
check "no success reported: the summary counts failures" grep -q ' [1-9][0-9]* failed)' "$tmp/k.out"
t1=$(date +%s)
rgw_gateway_start || { echo "not ok - radosgw restarts"; exit 1; }
echo "ok - radosgw restarts ($(($(date +%s) - t1)) s)"
done_before=$(listed resume%2F)
open_before=$(s3curl "$EP/bkt?prefix=resume%2F&uploads=" | grep -o '<Upload>' | wc -l)
echo "# after the kill: $done_before objects complete, $open_before multipart uploads left open"
check "no manifest after the failed run (and $done_before of 303 objects complete)" eval '[ "$done_before" -lt 303 ] && absent "$EP/bkt/resume/.jobfs-stage-manifest"' 
check "the rerun completes" sh -c "'$J' stage-out '$src' s3://bkt/resume/ --progress none > '$tmp/k2.out' 2>&1"
check "the rerun skipped exactly the $done_before complete objects" grep -q "303 objects ($((303 - done_before)) copied, $done_before skipped as complete, 0 failed)" "$tmp/k2.out"
shown "$tmp/k2.out"
check "the rerun aborted the $open_before uploads the killed run left open" eval \
  '[ "$open_before" -ge 1 ] && grep -q "aborted $open_before multipart upload.* left open under s3://bkt/resume/" "$tmp/k2.out" && lacks "<Upload>" "$EP/bkt?prefix=resume%2F&uploads="'
shown "$tmp/k2.out"
check "after the resume every object is byte-identical on radosgw" server_same "$src" resume
check "and the manifest is there" s3curl -I -o /dev/null "$EP/bkt/resume/.jobfs-stage-manifest"

echo "# $(($(date +%s) - t0)) s in all"
exit $((fails > 0))
