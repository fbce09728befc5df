#!/usr/bin/env bash
# UCX's io_demo with its data and transaction check (-q): a server and a
# client process connected through librdmacm (UCX's rdmacm transport) on
# softverbs0, reads and writes of random sizes up to 64 KiB, every byte
# compared. Passes when the client exits with status OK and its frames
# went through the soft devices.
#
# Usage: ucx_io_demo_test.sh PATH/TO/softverbs LINK_LAYER
set -uo pipefail
link_layer=${2:?say the link layer: ib or eth}
test_name=ucx_io_demo_${link_layer}
source "$(dirname "${BASH_SOURCE[0]}")/ecosystem_lib.sh"
export SOFTVERBS_LINK_LAYER=$link_layer
need_packages ucx-utils

# UCX finds devices through their files as well as their verbs; only the
# verbs transports and rdmacm, so nothing can go through shared memory.
ucx=(env UCX_TLS=rc_v,ud_v,rdmacm UCX_NET_DEVICES=softverbs0:1)
port=$(free_tcp_port)
watch_traffic io_demo
# The server and the client must agree on the largest size (the server
# asserts it).
start_bounded 60 "$cli" run --device-files -- "${ucx[@]}" io_demo -p "$port" -q -d 1:65536 >"$work/server.log" 2>&1
server=$!
# The server listens once its CM id is bound: wait for it rather than sleep.
wait_for_listener "$port"
bounded 60 "$cli" run --device-files -- "${ucx[@]}" io_demo -p "$port" -q -i 5000 -o read,write \
  -d 1:65536 127.0.0.1 >"$work/client.log" 2>&1
status=$?
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null
check
((status == 0)) || fail "io_demo's client exited with $status"
check
grep -q "Client exit with status 'OK'" "$work/client.log" || fail "io_demo's client did not end OK"
check
! grep -qi "data corruption\|validation failed\|failed to validate" "$work/client.log" "$work/server.log" ||
  fail "io_demo found corrupted data"
check_traffic
echo "$test_name: io_demo -q, 5000 iterations of read and write, OK; $frames frames through softverbs0"
((failures == 0)) || tail -n 20 "$work/client.log" "$work/server.log"
finish
