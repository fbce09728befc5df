#!/usr/bin/env bash
# iperf, unmodified, over rsocket: librdmacm's preload library turns its
# TCP sockets into RDMA connections on softverbs0. One stream, then four in
# parallel, each for 3 seconds. Passes when both runs end with status 0,
# report a transfer, and their frames went through the soft devices. The
# throughputs are printed, not judged (docs/ecosystem.md compares them).
#
# Usage: rsocket_iperf_test.sh PATH/TO/softverbs LINK_LAYER
set -uo pipefail
link_layer=${2:?say the link layer: ib or eth}
test_name=rsocket_iperf_${link_layer}
source "$(dirname "${BASH_SOURCE[0]}")/ecosystem_lib.sh"
export SOFTVERBS_LINK_LAYER=$link_layer
need_packages iperf librdmacm1

preload=$(dpkg -L librdmacm1 2>/dev/null | grep '/rsocket/librspreload\.so' | head -1)
[[ -n $preload ]] || skip "librdmacm1 holds no rsocket/librspreload.so"
# After softverbs' own preloads, not in their place.
rsocket=("$cli" run -- sh -c "LD_PRELOAD=\$LD_PRELOAD:$preload exec \"\$@\"" rsocket)

watch_traffic iperf
# A server of its own for each run: iperf 2.1.8's server, given a second
# client with -P under rsocket, can leave its stream threads blocked on a
# mutex in freed memory (every QP idle, nothing outstanding), whatever the
# speed of the transport.
for streams in 1 4; do
  port=$(free_tcp_port)
  start_bounded 40 "${rsocket[@]}" iperf -s -p "$port" >"$work/server-$streams.log" 2>&1
  server=$!
  wait_for_listener "$port"
  bounded 30 "${rsocket[@]}" iperf -c 127.0.0.1 -p "$port" -t 3 -P "$streams" >"$work/client-$streams.log" 2>&1
  status=$?
  check
  ((status == 0)) || fail "iperf -P $streams exited with $status"
  total=$(grep -E "^\[ *(SUM|1)\].*sec" "$work/client-$streams.log" | tail -1 | grep -oE '[0-9.]+ [GMK]bits/sec')
  check
  [[ -n $total ]] || fail "iperf -P $streams reported no transfer"
  echo "$test_name: iperf -P $streams: ${total:-nothing}"
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
done
check_traffic "rsocket fell back to TCP?"
((failures == 0)) || tail -n 20 "$work"/*.log
finish
