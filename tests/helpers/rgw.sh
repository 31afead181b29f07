# tests/helpers/rgw.sh: sourced by tests/stage_rgw_test.sh. A Ceph radosgw on a one-mon,
# one-OSD cluster on 127.0.0.1 (the recipe of ../shared/research/s3-servers.md): cephx off,
# BlueStore on a sparse file, every daemon a child of the calling shell (run with -f), so
# rgw_stop ends exactly what rgw_start started and nothing else.
#   rgw_start DIR PORT   creates the cluster in DIR and the S3 user RGW_ACCESS_KEY /
#                        RGW_SECRET_KEY; S3 on 127.0.0.1:PORT, the mon on PORT+1 (v2) and
#                        PORT+2 (v1), the OSD binds in PORT+3..PORT+19 (a caller keeps
#                        PORT..PORT+19 to itself). Waits until S3 answers and the user exists,
#                        at most RGW_START_TIMEOUT seconds (90); on failure it prints why and
#                        the tail of the Ceph logs, stops what it started and returns 1.
#   rgw_gateway_kill     SIGKILL to radosgw only (the mon and the OSD keep the data)
#   rgw_gateway_start    starts radosgw again on the same cluster and waits until it answers
#   rgw_stop             stops radosgw, the OSD and the mon (SIGTERM, then SIGKILL)
#   rgw_debug LEVEL      sets debug_rgw of the running radosgw (its log: $RGW_DIR/log/rgw.log)
# A caller calls rgw_stop from its EXIT trap: then an interrupted test leaves nothing running.
RGW_ACCESS_KEY=JOBFSRGWACCESSKEY
RGW_SECRET_KEY=jobfsRgwSecretKey0123456789
RGW_DIR=
RGW_PORT=
RGW_MON_PID=
RGW_OSD_PID=
RGW_GW_PID=
RGW_DEADLINE=0

rgw_missing() { # prints the Ceph programs that are not installed (empty: all there)
  for p in ceph-mon ceph-osd radosgw radosgw-admin ceph ceph-authtool monmaptool uuidgen; do
    command -v "$p" >/dev/null 2>&1 || printf '%s ' "$p"
  done
}

_rgw_left() { # seconds left before the start-up deadline (at least 1)
  l=$((RGW_DEADLINE - $(date +%s)))
  [ "$l" -gt 0 ] && echo "$l" || echo 1
}
_rgw_ceph() { timeout "$(_rgw_left)" ceph -c "$RGW_DIR/ceph.conf" --connect-timeout 10 "$@"; }

_rgw_fail() { # MESSAGE: says why, shows the logs' tails, stops everything, returns 1
  echo "rgw: $1" >&2
  for l in "$RGW_DIR"/log/*.log "$RGW_DIR"/*.out; do
    [ -s "$l" ] || continue
    echo "rgw: --- last lines of $l" >&2
    tail -n 15 "$l" | sed 's/^/rgw:   /' >&2
  done
  rgw_stop
  return 1
}

_rgw_alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

rgw_start() {
  RGW_DIR=$1 RGW_PORT=$2
  m=$(rgw_missing)
  if [ -n "$m" ]; then echo "rgw: not installed: $m(run scripts/install-deps)" >&2; return 1; fi
  RGW_DEADLINE=$(($(date +%s) + ${RGW_START_TIMEOUT:-90}))
  if command -v ss >/dev/null 2>&1; then
    busy=$(ss -Htln | awk -v lo="$RGW_PORT" -v hi="$((RGW_PORT + 19))" \
             '{ n = split($4, a, ":"); p = a[n] + 0; if (p >= lo && p <= hi) print p }' | sort -u | tr '\n' ' ')
    if [ -n "$busy" ]; then echo "rgw: ports $RGW_PORT..$((RGW_PORT + 19)) are not free (in use: $busy)" >&2; return 1; fi
  fi
  D=$RGW_DIR
  rm -rf "$D"
  mkdir -p "$D/run" "$D/log" "$D/mon" "$D/osd" "$D/rgw"
  fsid=$(uuidgen)
  monaddr="[v2:127.0.0.1:$((RGW_PORT + 1)),v1:127.0.0.1:$((RGW_PORT + 2))]"
  # auth none needs the crc/secure client modes, or radosgw waits 300 s for a ticket (-13).
  cat > "$D/ceph.conf" <<EOF
[global]
fsid = $fsid
mon_host = $monaddr
public_addr = 127.0.0.1
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
ms_mon_client_mode = crc secure
ms_client_mode = crc secure
ms_bind_port_min = $((RGW_PORT + 3))
ms_bind_port_max = $((RGW_PORT + 19))
run_dir = $D/run
admin_socket = $D/run/\$name.asok
pid_file = $D/run/\$name.pid
log_file = $D/log/\$name.log
keyring = $D/keyring
mon_data = $D/mon/\$name
osd_data = $D/osd/\$name
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 5
osd_crush_chooseleaf_type = 0
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_max_pg_per_osd = 1000
osd_objectstore = bluestore
bluestore_block_create = true
bluestore_block_size = 10737418240
bluestore_block_db_create = false
bluestore_block_wal_create = false
osd_memory_target = 1073741824
bluestore_cache_autotune = false
bluestore_cache_size = 268435456
[client.rgw.jobfs]
rgw_frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw_data = $D/rgw
log_file = $D/log/rgw.log
EOF
  C="-c $D/ceph.conf"
  ceph-authtool --create-keyring "$D/keyring" --gen-key -n mon. --cap mon 'allow *' >"$D/mkfs.out" 2>&1 &&
    monmaptool --create --fsid "$fsid" --addv a "$monaddr" "$D/monmap" >>"$D/mkfs.out" 2>&1 &&
    ceph-mon $C --mkfs -i a --monmap "$D/monmap" >>"$D/mkfs.out" 2>&1 ||
    { _rgw_fail "creating the monitor failed"; return 1; }
  ceph-mon $C -f -i a >"$D/mon.out" 2>&1 &
  RGW_MON_PID=$!
  osd_uuid=$(uuidgen)
  id=$(_rgw_ceph osd new "$osd_uuid" 2>>"$D/mkfs.out") || { _rgw_fail "the monitor did not answer 'ceph osd new'"; return 1; }
  mkdir -p "$D/osd/osd.$id"
  timeout "$(_rgw_left)" ceph-osd $C -i "$id" --mkfs --osd-uuid "$osd_uuid" >>"$D/mkfs.out" 2>&1 ||
    { _rgw_fail "ceph-osd --mkfs failed"; return 1; }
  ceph-osd $C -f -i "$id" >"$D/osd.out" 2>&1 &
  RGW_OSD_PID=$!
  until _rgw_ceph osd stat 2>/dev/null | grep -q ' 1 up'; do
    _rgw_alive "$RGW_OSD_PID" || { _rgw_fail "ceph-osd exited"; return 1; }
    [ "$(date +%s)" -lt "$RGW_DEADLINE" ] || { _rgw_fail "the OSD was not up within ${RGW_START_TIMEOUT:-90} s"; return 1; }
    sleep 1
  done
  rgw_gateway_start || return 1
  timeout "$(_rgw_left)" radosgw-admin $C user create --uid=jobfs --display-name=jobfs \
    --access-key="$RGW_ACCESS_KEY" --secret-key="$RGW_SECRET_KEY" >"$D/user.out" 2>&1 ||
    { _rgw_fail "radosgw-admin user create failed"; return 1; }
}

rgw_gateway_start() {
  [ "$RGW_DEADLINE" -gt "$(date +%s)" ] || RGW_DEADLINE=$(($(date +%s) + ${RGW_START_TIMEOUT:-90}))
  radosgw -c "$RGW_DIR/ceph.conf" -f -n client.rgw.jobfs >>"$RGW_DIR/rgw.out" 2>&1 &
  RGW_GW_PID=$!
  until curl -s -o /dev/null "http://127.0.0.1:$RGW_PORT/"; do
    _rgw_alive "$RGW_GW_PID" || { _rgw_fail "radosgw exited"; return 1; }
    [ "$(date +%s)" -lt "$RGW_DEADLINE" ] ||
      { _rgw_fail "radosgw did not answer on 127.0.0.1:$RGW_PORT within ${RGW_START_TIMEOUT:-90} s"; return 1; }
    sleep 0.5
  done
  RGW_DEADLINE=0
}

rgw_gateway_kill() {
  if [ -n "$RGW_GW_PID" ]; then
    kill -KILL "$RGW_GW_PID" 2>/dev/null
    wait "$RGW_GW_PID" 2>/dev/null
  fi
  RGW_GW_PID=
}

rgw_debug() { # LEVEL
  ceph --admin-daemon "$RGW_DIR/run/client.rgw.jobfs.asok" config set debug_rgw "$1" >/dev/null
}

_rgw_end() { # PID: SIGTERM, up to 10 s, then SIGKILL; reaps it
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null || { wait "$1" 2>/dev/null; return 0; }
  i=0
  while kill -0 "$1" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  kill -KILL "$1" 2>/dev/null
  wait "$1" 2>/dev/null
  return 0
}

rgw_stop() {
  _rgw_end "$RGW_GW_PID"
  _rgw_end "$RGW_OSD_PID"
  _rgw_end "$RGW_MON_PID"
  RGW_GW_PID= RGW_OSD_PID= RGW_MON_PID=
}
