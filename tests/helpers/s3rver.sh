# tests/helpers/s3rver.sh: sourced by tests/stage_test.sh and bench/stage. Starts and stops
# @20minutes/s3rver 5.0.0 (installed by scripts/install-deps; it verifies SigV4) on 127.0.0.1.
#   s3rver_start DATA_DIR PORT [ADDR]  starts it on ADDR (default 127.0.0.1; pid in
#                                      S3RVER_PID), waits until it answers
#   s3rver_start_free DATA_DIR [ADDR]  the same on a port it picks (in S3RVER_PORT): below the
#                                      kernel's ephemeral range, where an outgoing connection
#                                      cannot hold it, and another one if it is taken anyway
#   s3rver_stop                  stops it
# node needs --openssl-legacy-provider: the listing's continuation tokens use DES.
S3RVER_DIR=${JOBFS_S3RVER_DIR:-/opt/jobfs-test/s3rver}
S3RVER_PID=
s3rver_start() {
  if [ ! -f "$S3RVER_DIR/run.js" ]; then
    echo "s3rver is not installed in $S3RVER_DIR: run scripts/install-deps" >&2
    return 1
  fi
  addr=${3:-127.0.0.1}
  mkdir -p "$1"
  # (9>&-: not the Slurm tests' cluster lock, which it would hold for as long as it runs.)
  node --openssl-legacy-provider "$S3RVER_DIR/run.js" -d "$1" -a "$addr" -p "$2" --silent \
    > "$1.log" 2>&1 9>&- &
  S3RVER_PID=$!
  i=0
  while ! curl -s -o /dev/null "http://$addr:$2/"; do
    i=$((i + 1))
    if [ $i -gt 100 ] || ! kill -0 "$S3RVER_PID" 2>/dev/null; then
      echo "s3rver did not start on port $2:" >&2
      cat "$1.log" >&2
      return 1
    fi
    sleep 0.1
  done
}
S3RVER_PORT=
s3rver_start_free() {
  tries=0
  while :; do
    # (seen: a port derived from the PID, inside the ephemeral range 32768-60999, was held by
    # an outgoing connection of a test running beside it: EADDRINUSE)
    S3RVER_PORT=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000))
    s3rver_start "$1" "$S3RVER_PORT" "${2:-}" 2> "$1.start-err" && { rm -f "$1.start-err"; return 0; }
    tries=$((tries + 1))
    if [ "$tries" -ge 5 ] || ! grep -q EADDRINUSE "$1.start-err"; then
      cat "$1.start-err" >&2
      return 1
    fi
  done
}
s3rver_stop() { # never fails: it runs in EXIT traps of `set -e` scripts, before their other cleanup
  if [ -n "$S3RVER_PID" ]; then
    kill "$S3RVER_PID" 2>/dev/null || true
    wait "$S3RVER_PID" 2>/dev/null || true
  fi
  S3RVER_PID=
}
