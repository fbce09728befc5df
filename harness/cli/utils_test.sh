#!/usr/bin/env bash
# Runs rdma-core's unmodified ibverbs utilities on softverbs0 under
# `softverbs run`: ibv_devices, ibv_devinfo -v, and ibv_rc_pingpong between
# two processes with a range of flags, ibv_ud_pingpong, ibv_srq_pingpong and
# ibv_xsrq_pingpong. Each case is bounded in time and each pingpong pair has
# its own TCP port. Fails if any case fails.
#
# Usage: utils_test.sh PATH/TO/softverbs [CASE_FILTER_REGEX]
#   UTILS_TEST_TIMEOUT (seconds, default 120) bounds each program.
#   UTILS_TEST_SKIP (a regex) leaves out the cases it matches.
set -uo pipefail

cli=${1:?usage: utils_test.sh PATH/TO/softverbs [CASE_FILTER_REGEX]}
filter=${2:-.}
skip=${UTILS_TEST_SKIP:-}

# wanted NAME: the case is selected by the filter and not skipped.
wanted() {
  [[ $1 =~ $filter ]] && ! [[ -n $skip && $1 =~ $skip ]]
}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../../scripts/lib/client-server.sh"

limit=${UTILS_TEST_TIMEOUT:-120}
PAIR_LOG_DIR=$(mktemp -d)
trap 'rm -rf "$PAIR_LOG_DIR"' EXIT

source "$here/../../scripts/lib/case-record.sh"

for tool in ibv_devices ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ibv_srq_pingpong ibv_xsrq_pingpong; do
  if ! command -v $tool >/dev/null; then
    echo "$tool is missing (package ibverbs-utils); run scripts/setup.sh"
    exit 1
  fi
done

# single NAME CHECK_REGEX PROGRAM [ARGS...]: one process; passes when it
# exits 0 and its output matches CHECK_REGEX (grep -E, every line of it).
single() {
  local name=$1 checks=$2
  shift 2
  wanted "$name" || return 0
  local log="$PAIR_LOG_DIR/$name.log" status ok=yes
  timeout --kill-after=5 "$limit" "$cli" run -- "$@" >"$log" 2>&1 </dev/null
  status=$?
  if ((status != 0)); then
    echo "  $name: $(describe_status "$status")"
    ok=no
  else
    local check
    while IFS= read -r check; do
      [[ -z $check ]] && continue
      if ! grep -Eq -- "$check" "$log"; then
        echo "  $name: output does not match /$check/"
        ok=no
      fi
    done <<<"$checks"
  fi
  [[ $ok == yes ]] || sed 's/^/  | /' "$log"
  record "$name" $ok
}

# program_pingpong NAME PROGRAM [ARGS...]: server and client of one of the
# ibv_*_pingpong programs with the same flags; both must succeed, and each
# must report its transfer.
program_pingpong() {
  local name=$1 program=$2
  shift 2
  wanted "$name" || return 0
  # shellcheck disable=SC2034  # read by run_client_server
  SERVER_CMD=("$cli" run -- "$program" -d softverbs0 -p @PORT@ "$@")
  # shellcheck disable=SC2034
  CLIENT_CMD=("$cli" run -- "$program" -d softverbs0 -p @PORT@ "$@" localhost)
  local ok=yes
  if ! run_client_server "$name" "$limit"; then
    echo "  $name: server $(describe_status "$PAIR_SERVER_STATUS")," \
         "client $(describe_status "$PAIR_CLIENT_STATUS")"
    ok=no
  elif ! grep -Eq 'bytes in [0-9.]+ seconds' "$PAIR_CLIENT_LOG" ||
       ! grep -Eq 'bytes in [0-9.]+ seconds' "$PAIR_SERVER_LOG"; then
    echo "  $name: a side did not report its transfer"
    ok=no
  fi
  [[ $ok == yes ]] || print_client_server_logs
  record "$name" $ok
}

pingpong() {
  local name=$1
  shift
  program_pingpong "$name" ibv_rc_pingpong "$@"
}

# xsrq_pingpong NAME [ARGS...]: ibv_xsrq_pingpong, whose sides say "success"
# once every message went both ways through their XRC SRQs.
xsrq_pingpong() {
  local name=$1
  shift
  wanted "$name" || return 0
  # shellcheck disable=SC2034  # read by run_client_server
  SERVER_CMD=("$cli" run -- ibv_xsrq_pingpong -d softverbs0 -p @PORT@ "$@")
  # shellcheck disable=SC2034
  CLIENT_CMD=("$cli" run -- ibv_xsrq_pingpong -d softverbs0 -p @PORT@ "$@" localhost)
  local ok=yes
  if ! run_client_server "$name" "$limit"; then
    echo "  $name: server $(describe_status "$PAIR_SERVER_STATUS")," \
         "client $(describe_status "$PAIR_CLIENT_STATUS")"
    ok=no
  elif ! grep -q '^success' "$PAIR_CLIENT_LOG" || ! grep -q '^success' "$PAIR_SERVER_LOG"; then
    echo "  $name: a side did not report success"
    ok=no
  fi
  [[ $ok == yes ]] || print_client_server_logs
  record "$name" $ok
}

# What ibv_devices and ibv_devinfo must show for softverbs0, taken from the
# CLI's own description of the device, so both agree on its identity.
device_row=$("$cli" devices | awk '$1 == "softverbs0"')
guid=$(awk '{print $2}' <<<"$device_row")
if [[ -z $guid ]]; then
  echo "softverbs devices does not list softverbs0:"
  "$cli" devices
  exit 1
fi
lid=$(awk '{print $4}' <<<"$device_row")
gid0=$(awk '{print $5}' <<<"$device_row")
guid_plain=${guid//:/}

single ibv_devices "^[[:space:]]*softverbs0[[:space:]]+$guid_plain" ibv_devices
single ibv_devinfo "hca_id:[[:space:]]*softverbs0
node_guid:[[:space:]]*$guid
state:[[:space:]]*PORT_ACTIVE
link_layer:[[:space:]]*InfiniBand
port_lid:[[:space:]]*$((lid))" ibv_devinfo -d softverbs0
single ibv_devinfo_verbose "hca_id:[[:space:]]*softverbs0
max_qp:[[:space:]]*[1-9]
max_cqe:[[:space:]]*[1-9]
active_mtu:[[:space:]]*[0-9]+ \\([1-5]\\)
GID\\[[[:space:]]*0\\]:[[:space:]]*$gid0" ibv_devinfo -v -d softverbs0

pingpong rc_pingpong_default
pingpong rc_pingpong_gid0 -g 0
pingpong rc_pingpong_events -e
pingpong rc_pingpong_check -c
pingpong rc_pingpong_events_check_gid0 -e -c -g 0
for size in 1 2 63 64 1000 4095 4096 4097 16384 65536 262144 1048576; do
  pingpong "rc_pingpong_size_$size" -c -s "$size" -n 100
done
pingpong rc_pingpong_100000_iterations -s 64 -n 100000
for mtu in 256 512 1024 2048 4096; do
  pingpong "rc_pingpong_mtu_$mtu" -c -m "$mtu" -s 16384 -n 200
done
pingpong rc_pingpong_rx_depth_1 -r 1 -n 200
pingpong rc_pingpong_large_events -e -c -s 1048576 -n 20
# The extended verbs: -N posts with the ibv_wr_* builders (ibv_create_qp_ex),
# -t polls an ibv_create_cq_ex CQ with completion timestamps.
pingpong rc_pingpong_new_send -N
pingpong rc_pingpong_new_send_check -N -c
pingpong rc_pingpong_new_send_events_check -e -N -c
pingpong rc_pingpong_timestamps -t
# Memory: -o registers an on-demand MR, -O an implicit one (NULL, SIZE_MAX)
# and -P prefetches it with ibv_advise_mr; -j sends from device memory
# (ibv_alloc_dm, a zero-based ibv_reg_dm_mr, ibv_memcpy_to/from_dm).
pingpong rc_pingpong_odp_check -o -c
pingpong rc_pingpong_implicit_odp_prefetch_check -O -P -c
pingpong rc_pingpong_odp_prefetch_events -o -P -e -c
pingpong rc_pingpong_dm_check -j -c
pingpong rc_pingpong_dm_large_check -j -c -s 65536 -n 200
# UD with address handles (every receive behind the 40-byte GRH area), and
# an SRQ shared by 16 (or 32) RC QPs.
program_pingpong ud_pingpong_check ibv_ud_pingpong -c
program_pingpong ud_pingpong_gid0_check ibv_ud_pingpong -g 0 -c
program_pingpong ud_pingpong_events_check ibv_ud_pingpong -e -c
program_pingpong ud_pingpong_small ibv_ud_pingpong -s 1 -c -n 200
program_pingpong srq_pingpong_check ibv_srq_pingpong -c
program_pingpong srq_pingpong_events_check ibv_srq_pingpong -e -c
program_pingpong srq_pingpong_32_qps ibv_srq_pingpong -q 32 -c -n 200
program_pingpong srq_pingpong_large ibv_srq_pingpong -s 65536 -c -n 100
# XRC: an initiator and a target QP each way, every message into the peer's
# XRC SRQ, named by its number.
xsrq_pingpong xsrq_pingpong_default
xsrq_pingpong xsrq_pingpong_events_large -e -s 65536 -n 100

# ibv_rc_pingpong with 1% of the frames dropped on both sides still
# completes, and `softverbs stats` shows the retransmissions while it runs.
# The server loses 1% of all it sends, the client 1% of its requests but
# none of its ACKs: the last frame
# of the run is its ACK of the server's last message, and it exits right
# after sending it (ibv_rc_pingpong has no closing handshake). Were that ACK
# lost, the server would retransmit to a QP that is gone and end with
# IBV_WC_RETRY_EXC_ERR, as on any HCA.
client_requests_lost="seed=12; drop:dir=tx,p=0.01,op=SEND_FIRST; drop:dir=tx,p=0.01,op=SEND_MIDDLE"
client_requests_lost+="; drop:dir=tx,p=0.01,op=SEND_LAST; drop:dir=tx,p=0.01,op=SEND_ONLY"
lossy_pingpong() {
  local name=rc_pingpong_1pct_drop_stats
  wanted "$name" || return 0
  local port log_server="$PAIR_LOG_DIR/$name.server.log" log_client="$PAIR_LOG_DIR/$name.client.log"
  local stats_log="$PAIR_LOG_DIR/$name.stats.log" ok=yes
  port=$(free_tcp_port) || { record "$name" no; return; }
  SOFTVERBS_FAULTS="seed=11; drop:p=0.01,dir=tx" timeout --kill-after=5 "$limit" \
    "$cli" run -- ibv_rc_pingpong -d softverbs0 -p "$port" >"$log_server" 2>&1 </dev/null &
  local server_pid=$!
  until tcp_port_is_listening "$port" || ! kill -0 "$server_pid" 2>/dev/null; do sleep 0.05; done
  SOFTVERBS_FAULTS="$client_requests_lost" timeout --kill-after=5 "$limit" \
    "$cli" run -- ibv_rc_pingpong -d softverbs0 -p "$port" localhost >"$log_client" 2>&1 </dev/null &
  local client_pid=$!
  local most=0 now
  : >"$stats_log"
  while kill -0 "$client_pid" 2>/dev/null; do
    "$cli" stats >>"$stats_log" 2>&1
    now=$(grep -o 'retransmitted_packets=[0-9]*' "$stats_log" | cut -d= -f2 | sort -n | tail -1)
    ((${now:-0} > most)) && most=$now
    sleep 0.2
  done
  wait "$client_pid"; local client_status=$?
  wait "$server_pid"; local server_status=$?
  if ((client_status != 0 || server_status != 0)); then
    echo "  $name: server $(describe_status "$server_status"), client $(describe_status "$client_status")"
    ok=no
  elif ! grep -Eq 'bytes in [0-9.]+ seconds' "$log_client"; then
    echo "  $name: the client did not report its transfer"
    ok=no
  elif ((most == 0)); then
    echo "  $name: softverbs stats never showed a retransmission"
    ok=no
  else
    echo "  $name: softverbs stats showed up to $most retransmitted packets"
  fi
  [[ $ok == yes ]] || sed 's/^/  | /' "$log_server" "$log_client" "$stats_log" | tail -40
  record "$name" $ok
}
lossy_pingpong

report_cases
