#!/usr/bin/env bash
# fio's rdma ioengine, unmodified, between two processes on softverbs0: a
# server (rw=read, --port) and a client (rw=write, --hostname) with each of
# the verbs write, read and send, 16 MiB in 64 KiB blocks. Passes when both
# fio processes end with status 0 and no error, the client reports the 16 MiB
# (for send the server too), and their frames went through the soft devices.
#
# Usage: fio_rdma_test.sh PATH/TO/softverbs
set -uo pipefail
test_name=fio_rdma
source "$(dirname "${BASH_SOURCE[0]}")/ecosystem_lib.sh"
need_packages fio

# 16 MiB in blocks of 64 KiB: 256 blocks.
blocks=256
# --thread: fio forks its jobs by default and the job calls setsid(), so a
# timeout would kill fio and leave its job blocked in ibv_get_cq_event.
fio=(fio --thread --ioengine=rdma --bs=64k --size=16m)

watch_traffic fio
for verb in write read send; do
  # For write and read the server only lends its buffers (the client picks
  # one per block) and waits for the client's closing message. For send it
  # receives every block: fio connects with rnr_retry_count 0, so a SEND
  # that finds no receive posted fails the client (RNR retry exceeded) and
  # both sides then wait forever. The server therefore posts a receive for
  # every block at once (iodepth=blocks), before the client's first send
  # (fio's client sleeps 0.5 s for that); an iodepth only deeper than the
  # client's (fio's advice) fails when the server's thread lags for lack of
  # CPU while its progress thread keeps acknowledging.
  depth=8
  [[ $verb == send ]] && depth=$blocks
  port=$(free_tcp_port)
  start_bounded 40 "$cli" run -- "${fio[@]}" --name=server --port="$port" --rw=read \
    --iodepth="$depth" >"$work/server-$verb.log" 2>&1
  server=$!
  wait_for_listener "$port"
  # The client writes even for verb=read: fio takes rw=read for the server.
  bounded 30 "$cli" run -- "${fio[@]}" --name=client --hostname=127.0.0.1 --port="$port" \
    --verb="$verb" --rw=write --iodepth=8 >"$work/client-$verb.log" 2>&1
  client_status=$?
  # The server ends by itself right after the client; if the client failed
  # or never connected (fio exits with 0 then too) it would wait forever.
  for ((i = 0; i < 50; i++)); do
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  kill "$server" 2>/dev/null
  wait "$server"
  server_status=$?
  check
  ((client_status == 0)) || fail "$verb: the client exited with $client_status"
  check
  ((server_status == 0)) || fail "$verb: the server exited with $server_status"
  # fio exits with 0 even when it could not connect: the bytes are the proof.
  moved=$(grep -oE 'WRITE: .*io=16\.0MiB' "$work/client-$verb.log")
  check
  [[ -n $moved ]] || fail "$verb: the client did not report 16.0MiB written"
  check
  grep -q 'err= 0' "$work/client-$verb.log" || fail "$verb: the client reported no err= 0"
  check
  grep -q 'err= 0' "$work/server-$verb.log" || fail "$verb: the server reported no err= 0"
  if [[ $verb == send ]]; then
    check
    grep -qE 'READ: .*io=16\.0MiB' "$work/server-$verb.log" ||
      fail "send: the server did not report 16.0MiB received"
  fi
  echo "$test_name: verb=$verb: client $client_status, server $server_status, ${moved:+16.0MiB moved}"
done

check_traffic
((failures == 0)) || tail -n 20 "$work"/*.log
finish
