#!/usr/bin/env bash
# Runs librdmacm's programs, unmodified, between two processes on soft
# devices under `softverbs run`: rping, rdma_server/rdma_client,
# rdma_xserver/rdma_xclient, ucmatose, udaddy, mckey, rstream, riostream,
# cmtime, perftest over the CM (-R) and libfabric's verbs provider
# (fi_pingpong, MSG and RxM RDM endpoints), on an InfiniBand and on a RoCE
# device. Both sides must exit 0 (cmtime's server never ends: only its
# client must). Each program is bounded in time.
#
# The client starts once the server listens: on its RDMA CM port, which
# `softverbs listeners` shows, or on its TCP control port (fi_pingpong).
#
# Usage: rdmacm_programs_test.sh PATH/TO/softverbs [CASE_FILTER_REGEX]
#   RDMACM_TEST_TIMEOUT (seconds, default 60) bounds each program.
set -uo pipefail
# Every program here stays on this host: no UDP wire onto its network.
export SOFTVERBS_UDP=0

cli=${1:?usage: rdmacm_programs_test.sh PATH/TO/softverbs [CASE_FILTER_REGEX]}
filter=${2:-.}
limit=${RDMACM_TEST_TIMEOUT:-60}
logs=$(mktemp -d)
# A server stopped by its time limit leaves its segments behind; under a
# prefix of the test's own (as ctest gives), nothing else uses them.
cleanup() {
  rm -rf "$logs"
  [[ -n ${SOFTVERBS_SHM_PREFIX:-} ]] && rm -f "/dev/shm/$SOFTVERBS_SHM_PREFIX-$(id -u)-"*
}
trap cleanup EXIT

for tool in rping ucmatose rstream ib_send_lat fi_pingpong; do
  if ! command -v $tool >/dev/null; then
    echo "$tool is missing (packages rdmacm-utils, perftest, libfabric-bin); run scripts/setup.sh"
    exit 1
  fi
done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../../scripts/lib/client-server.sh"
source "$here/../../scripts/lib/case-record.sh"

# record_case NAME yes|no: recorded, with the tail of both sides' logs on failure.
record_case() {
  record "$1" "$2"
  [[ $2 == yes ]] && return
  echo "  --- server:"; sed 's/^/  /' "$logs/$1.server" | tail -15
  echo "  --- client:"; sed 's/^/  /' "$logs/$1.client" | tail -15
}

# Waits until a process listens on READY (cm:PORT or tcp:PORT) or PID ends.
wait_until_listening() {
  local ready=$1 pid=$2 deadline=$((SECONDS + limit))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
    case $ready in
      cm:*) "$cli" listeners 2>/dev/null | grep -q ":${ready#cm:} " && return 0 ;;
      tcp:*) tcp_port_is_listening "${ready#tcp:}" && return 0 ;;
    esac
    sleep 0.1
  done
  return 1
}

# cm_pair NAME SERVER_STATUS_MATTERS READY "SERVER ARGS" "CLIENT ARGS":
# @PORT@ in any of them becomes one port for the case.
cm_pair() {
  local name=$1 server_matters=$2 ready=$3 server_args=$4 client_args=$5
  [[ $name =~ $filter ]] || return 0
  local port=$((20000 + RANDOM % 12000))  # below the ephemeral range (32768 on)
  local -a server client
  read -r -a server <<<"${server_args//@PORT@/$port}"
  read -r -a client <<<"${client_args//@PORT@/$port}"
  timeout --kill-after=5 "$limit" "$cli" run -- "${server[@]}" >"$logs/$name.server" 2>&1 </dev/null &
  local server_pid=$! client_status=1
  if wait_until_listening "${ready//@PORT@/$port}" "$server_pid"; then
    timeout --kill-after=5 "$limit" "$cli" run -- "${client[@]}" >"$logs/$name.client" 2>&1 </dev/null
    client_status=$?
  else
    echo "(not started: the server never listened on ${ready//@PORT@/$port})" >"$logs/$name.client"
  fi
  if [[ $server_matters == no ]] || ((client_status != 0)); then
    kill -TERM "$server_pid" 2>/dev/null
  fi
  wait "$server_pid"
  local server_status=$?
  [[ $server_matters == no ]] && server_status=0
  record_case "$name" "$( ((client_status == 0 && server_status == 0)) && echo yes || echo no)"
}

# The InfiniBand personality (the default), then RoCE.
for link in ib eth; do
  export SOFTVERBS_LINK_LAYER=$link
  cm_pair "${link}_rping" yes cm:@PORT@ "rping -s -a 127.0.0.1 -p @PORT@ -C 100 -V" \
    "rping -c -a 127.0.0.1 -p @PORT@ -C 100 -V"
  cm_pair "${link}_rdma_server" yes cm:@PORT@ "rdma_server -p @PORT@" "rdma_client -s 127.0.0.1 -p @PORT@"
  cm_pair "${link}_ucmatose" yes cm:@PORT@ "ucmatose -p @PORT@ -c 4 -C 20" \
    "ucmatose -s 127.0.0.1 -p @PORT@ -c 4 -C 20"
  cm_pair "${link}_udaddy" yes cm:7174 "udaddy" "udaddy -s 127.0.0.1"
  cm_pair "${link}_rstream" yes cm:@PORT@ "rstream -p @PORT@ -S 65536 -C 200" \
    "rstream -s 127.0.0.1 -p @PORT@ -S 65536 -C 200"
  cm_pair "${link}_fi_pingpong_msg" yes tcp:@PORT@ "fi_pingpong -p verbs -e msg -I 200 -B @PORT@" \
    "fi_pingpong -p verbs -e msg -I 200 -P @PORT@ 127.0.0.1"
  cm_pair "${link}_ib_write_bw_R" yes cm:@PORT@ "ib_write_bw -R -d softverbs0 -p @PORT@ -n 500" \
    "ib_write_bw -R -d softverbs0 -p @PORT@ -n 500 127.0.0.1"
done
export SOFTVERBS_LINK_LAYER=ib
cm_pair rdma_xserver yes cm:@PORT@ "rdma_xserver -p @PORT@ -c r" "rdma_xclient -s 127.0.0.1 -p @PORT@ -c r"
cm_pair rdma_xserver_xrc yes cm:@PORT@ "rdma_xserver -p @PORT@ -c x" "rdma_xclient -s 127.0.0.1 -p @PORT@ -c x"
cm_pair riostream yes cm:@PORT@ "riostream -p @PORT@ -S 4096 -C 200" \
  "riostream -s 127.0.0.1 -p @PORT@ -S 4096 -C 200"
# libfabric 1.17's rxm looks at its connection events every 10 ms from
# within a CQ read, and a disconnect it sees there while a receive still
# waits in the CQ crashes it or loses that receive (docs/rdmacm.md): one run
# in ten on a busy machine, whatever the provider. Looking once a second
# leaves a stall of over a second to hit it.
export FI_OFI_RXM_CM_PROGRESS_INTERVAL=1000000
cm_pair fi_pingpong_rxm yes tcp:@PORT@ "fi_pingpong -p verbs;ofi_rxm -e rdm -I 200 -B @PORT@" \
  "fi_pingpong -p verbs;ofi_rxm -e rdm -I 200 -P @PORT@ 127.0.0.1"
unset FI_OFI_RXM_CM_PROGRESS_INTERVAL
cm_pair cmtime no cm:@PORT@ "cmtime -p @PORT@" "cmtime -s 127.0.0.1 -p @PORT@ -c 50"
cm_pair ib_send_lat_R yes cm:@PORT@ "ib_send_lat -R -d softverbs0 -p @PORT@ -n 1000" \
  "ib_send_lat -R -d softverbs0 -p @PORT@ -n 1000 127.0.0.1"
cm_pair ib_read_lat_R yes cm:@PORT@ "ib_read_lat -R -d softverbs0 -p @PORT@ -n 1000" \
  "ib_read_lat -R -d softverbs0 -p @PORT@ -n 1000 127.0.0.1"
# An IPv6 address, and the second device's own address.
cm_pair rping_ipv6 yes cm:@PORT@ "rping -s -a ::1 -p @PORT@ -C 20 -V" "rping -c -a ::1 -p @PORT@ -C 20 -V"
SOFTVERBS_DEVICES=2 cm_pair rping_softverbs1 yes cm:@PORT@ "rping -s -a 127.0.0.2 -p @PORT@ -C 20 -V" \
  "rping -c -a 127.0.0.2 -p @PORT@ -C 20 -V"

# mckey: the receiver counts the sender's datagrams, which are lost if it
# has not joined yet, so the sender goes again until the receiver has all.
mckey_case() {
  local name=$1
  [[ $name =~ $filter ]] || return 0
  timeout --kill-after=5 "$limit" "$cli" run -- mckey -m 239.1.2.3 -C 10 \
    >"$logs/$name.server" 2>&1 </dev/null &
  local receiver=$!
  : >"$logs/$name.client"
  for _ in $(seq 1 40); do
    sleep 0.25
    kill -0 "$receiver" 2>/dev/null || break
    timeout --kill-after=5 "$limit" "$cli" run -- mckey -m 239.1.2.3 -s -C 10 \
      >>"$logs/$name.client" 2>&1 </dev/null
  done
  wait "$receiver"
  record_case "$name" "$( (($? == 0)) && echo yes || echo no)"
}
mckey_case mckey
SOFTVERBS_LINK_LAYER=eth mckey_case eth_mckey

# No listener: refused at once with the kernel's status (8: invalid service ID).
if [[ no_listener =~ $filter ]]; then
  out=$(timeout "$limit" "$cli" run -- rping -c -a 127.0.0.1 -p 19999 -C 1 2>&1)
  [[ $out == *"REJECTED, error 8"* ]] && record_case no_listener yes || {
    echo "$out" >"$logs/no_listener.client"; : >"$logs/no_listener.server"; record_case no_listener no; }
fi

report_cases
