#!/usr/bin/env bash
# Runs real RDMA programs, unmodified, between two processes on softverbs0
# under `softverbs run`: perftest (send, write, read and atomics; UD, SRQ,
# many QPs, every size), qperf's UD, RC and UC tests, and UCX (ucx_info's
# transports, ucx_perftest over rc_verbs and ud_verbs). Each case is bounded in time
# and has its own TCP port; perftest and ucx_perftest must exit 0 on both
# sides, qperf must report its figure.
#
# Usage: programs_test.sh PATH/TO/softverbs [CASE_FILTER_REGEX]
#   PROGRAMS_TEST_TIMEOUT (seconds, default 120) bounds each program.
#   PROGRAMS_TEST_SKIP (a regex) leaves out the cases it matches.
set -uo pipefail
# Every program here stays on this host: no UDP wire onto its network.
export SOFTVERBS_UDP=0

cli=${1:?usage: programs_test.sh PATH/TO/softverbs [CASE_FILTER_REGEX]}
filter=${2:-.}
skip=${PROGRAMS_TEST_SKIP:-}
limit=${PROGRAMS_TEST_TIMEOUT:-120}

wanted() {
  [[ $1 =~ $filter ]] && ! [[ -n $skip && $1 =~ $skip ]]
}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../../scripts/lib/client-server.sh"
PAIR_LOG_DIR=$(mktemp -d)
trap 'rm -rf "$PAIR_LOG_DIR"' EXIT

for tool in ib_send_bw qperf ucx_perftest; do
  if ! command -v $tool >/dev/null; then
    echo "$tool is missing (packages perftest, qperf, ucx-utils); run scripts/setup.sh"
    exit 1
  fi
done

source "$here/../../scripts/lib/case-record.sh"

# pair NAME PROGRAM [ARGS...]: server and client with the same arguments
# (the client adds localhost); both must exit 0.
pair() {
  local name=$1 program=$2
  shift 2
  wanted "$name" || return 0
  SERVER_CMD=("$cli" run -- "$program" "$@")
  CLIENT_CMD=("$cli" run -- "$program" "$@" localhost)
  if run_client_server "$name" "$limit"; then
    record "$name" yes
  else
    echo "  $name: server $(describe_status "$PAIR_SERVER_STATUS"), client $(describe_status "$PAIR_CLIENT_STATUS")"
    print_client_server_logs
    record "$name" no
  fi
}

perftest() {
  local name=$1 program=$2
  shift 2
  pair "$name" "$program" -d softverbs0 -p @PORT@ -F "$@"
}

# qperf's server never ends by itself: it runs bounded beside the client,
# which must print the test's figure.
qperf_case() {
  local name=$1 test=$2 figure=$3
  wanted "$name" || return 0
  local port log_server=$PAIR_LOG_DIR/$name.server.log log_client=$PAIR_LOG_DIR/$name.client.log
  port=$(free_tcp_port) || return 1
  timeout --kill-after=5 "$limit" "$cli" run -- qperf -lp "$port" >"$log_server" 2>&1 </dev/null &
  local server=$!
  local ok=no
  for _ in $(seq 1 50); do tcp_port_is_listening "$port" && break; sleep 0.1; done
  if timeout --kill-after=5 "$limit" "$cli" run -- qperf -lp "$port" -t 2 -i softverbs0:1 \
      localhost "$test" >"$log_client" 2>&1 </dev/null && grep -Eq "$figure" "$log_client"; then
    ok=yes
  fi
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
  if [[ $ok != yes ]]; then
    sed 's/^/  | client: /' "$log_client"
    sed 's/^/  | server: /' "$log_server"
  fi
  record "$name" $ok
}

ucx() {
  local name=$1 transport=$2 test=$3
  pair "$name" ucx_perftest -p @PORT@ -d softverbs0:1 -x "$transport" -t "$test" -n 5000
}

# What worked before UD and SRQ keeps working.
perftest ib_send_lat ib_send_lat -s 8 -n 2000
perftest ib_write_lat ib_write_lat -s 8 -n 2000
perftest ib_read_bw ib_read_bw -s 65536 -n 1000
perftest ib_read_lat ib_read_lat -s 8 -n 2000
perftest ib_atomic_bw ib_atomic_bw -n 2000
perftest ib_atomic_lat ib_atomic_lat -n 2000
# Event mode: ib_send_lat waits on one channel for both its CQs, and counts
# on the ACK of a message coming before the answer to it.
perftest ib_send_lat_events ib_send_lat -s 8 -n 2000 -e
perftest ib_send_bw_events ib_send_bw -s 4096 -n 2000 -e
perftest ib_send_bw_ud ib_send_bw -c UD -s 1024 -n 2000
perftest ib_send_lat_ud ib_send_lat -c UD -s 1024 -n 2000
perftest ib_send_bw_srq ib_send_bw --use-srq -s 65536 -n 2000
perftest ib_send_lat_srq ib_send_lat --use-srq -s 64 -n 2000
perftest ib_write_bw_8_qps ib_write_bw -q 8 -s 65536 -n 1000
perftest ib_write_bw_all_sizes ib_write_bw -a -n 100
perftest ib_send_bw_all_sizes ib_send_bw -a -n 100
# XRC: initiator to target, into the server's XRC SRQ.
perftest ib_send_bw_xrc ib_send_bw -c XRC -s 65536 -n 1000
perftest ib_write_bw_xrc ib_write_bw -c XRC -s 65536 -n 1000
perftest ib_read_lat_xrc ib_read_lat -c XRC -s 8 -n 1000
perftest ib_send_lat_xrc ib_send_lat -c XRC -s 8 -n 1000
qperf_case qperf_ud_lat ud_lat 'latency *= *[0-9.]+ [mun]?s'
qperf_case qperf_ud_bw ud_bw 'recv_bw *= *[0-9.]+ [KMG]?B/sec'
# qperf's RC and UC tests wait in ibv_get_cq_event (and end on a signal).
for test in rc_lat rc_rdma_write_lat rc_rdma_read_lat uc_lat; do
  qperf_case qperf_$test $test 'latency *= *[0-9.]+ [mun]?s'
done
for test in rc_bw rc_rdma_write_bw rc_rdma_read_bw uc_bw; do
  qperf_case qperf_$test $test '(^| )bw *= *[0-9.]+ [KMG]?B/sec|recv_bw *= *[0-9.]+ [KMG]?B/sec'
done
qperf_case qperf_rc_compare_swap_mr rc_compare_swap_mr 'msg_rate *= *[0-9.]+ [KM]?/sec'
# ucx_info must offer both verbs transports on the soft device.
if wanted ucx_info_transports; then
  info=$("$cli" run -- ucx_info -d 2>&1)
  if grep -q "Transport: rc_verbs" <<<"$info" && grep -q "Transport: ud_verbs" <<<"$info" &&
     grep -q "Device: softverbs0:1" <<<"$info"; then
    record ucx_info_transports yes
  else
    sed 's/^/  | /' <<<"$info"
    record ucx_info_transports no
  fi
fi
ucx ucx_rc_verbs_am_lat rc_verbs am_lat
ucx ucx_rc_verbs_put_bw rc_verbs put_bw
ucx ucx_ud_verbs_am_lat ud_verbs am_lat
ucx ucx_ud_verbs_am_bw ud_verbs am_bw

# A RoCE device, with the flag programs need there: which GID to use.
export SOFTVERBS_LINK_LAYER=eth
pair roce_rc_pingpong_gid1 ibv_rc_pingpong -d softverbs0 -p @PORT@ -g 1 -n 200
pair roce_ud_pingpong_gid1 ibv_ud_pingpong -d softverbs0 -p @PORT@ -g 1 -n 200 -c
perftest roce_ib_send_lat ib_send_lat -x 1 -s 8 -n 2000
perftest roce_ib_write_bw ib_write_bw -x 1 -s 65536 -n 1000
perftest roce_ib_read_lat ib_read_lat -x 1 -s 8 -n 1000
perftest roce_ib_send_bw_ud ib_send_bw -x 1 -c UD -s 1024 -n 2000
ucx ucx_roce_rc_verbs_am_lat rc_verbs am_lat
unset SOFTVERBS_LINK_LAYER

report_cases
