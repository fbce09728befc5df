#!/usr/bin/env bash
# RoCE soft devices on three hosts (network namespaces made by `softverbs
# topo`, each with its own registry) reach each other over the UDP wire:
# unmodified ibv_rc_pingpong with every buffer checked over IPv4 and IPv6
# GIDs, ibv_ud_pingpong, ib_send_lat and ib_write_bw, an RC pingpong that
# loses 2% of its packets each way (injected drops) and still checks every
# byte, the RC integrity soak with its fault mix, and librdmacm programs
# connecting across hosts (rping with data
# verified, rdma_client, rstream, ib_send_lat -R, udaddy, mckey with three
# hosts, a refused connection), and a hostile host sending crafted
# datagrams whose every drop the target counts while a pingpong under
# attack checks every buffer. The topology is removed however the test
# ends.
#
# Needs root (network namespaces): otherwise it exits 77, which ctest
# reports as skipped. Every program runs under timeout(1).
#
# Usage: udp_hosts_test.sh PATH/TO/softverbs
set -uo pipefail

cli=${1:?usage: udp_hosts_test.sh PATH/TO/softverbs}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/client-server.sh
source "$here/../../scripts/lib/client-server.sh"

if (($(id -u) != 0)); then
  echo "skipped: needs root for network namespaces (softverbs topo)"
  exit 77
fi
for tool in ip ibv_rc_pingpong ibv_ud_pingpong ib_send_lat ib_write_bw; do
  command -v $tool >/dev/null || { echo "$tool is missing; run scripts/setup.sh"; exit 1; }
done

topo=svu$$
export SOFTVERBS_LINK_LAYER=eth SOFTVERBS_UDP=1  # between namespaces: the UDP wire on
export SOFTVERBS_SHM_PREFIX=${SOFTVERBS_SHM_PREFIX:-svudp}
logs=$(mktemp -d)
PAIR_LOG_DIR=$logs
cleanup() {
  "$cli" topo --name "$topo" down
  rm -rf "$logs"
  rm -f /dev/shm/"$SOFTVERBS_SHM_PREFIX"-*
}
trap cleanup EXIT
"$cli" topo --name "$topo" up 3 >/dev/null || { echo "softverbs topo up failed"; exit 1; }

# The server's TCP port is looked for in the server's host.
server_host=2
PAIR_SERVER_NETNS=$topo-host$server_host

on_host() {
  local host=$1
  shift
  "$cli" topo --name "$topo" exec "$host" -- "$cli" run -- "$@"
}

failures=0
# pair LABEL SERVER_HOST CLIENT_HOST SERVER_ADDRESS -- PROGRAM ARGS...
pair() {
  local label=$1 address=$4
  server_host=$2
  PAIR_SERVER_NETNS=$topo-host$server_host
  local client_host=$3
  shift 5
  SERVER_CMD=(env "${PAIR_ENV[@]}" "$cli" topo --name "$topo" exec "$server_host" -- "$cli" run -- "$@" -p @PORT@)
  CLIENT_CMD=(env "${PAIR_ENV[@]}" "$cli" topo --name "$topo" exec "$client_host" -- "$cli" run -- "$@" -p @PORT@ "$address")
  if run_client_server "$label" 60; then
    echo "ok: $label"
  else
    echo "FAILED: $label (server $(describe_status "$PAIR_SERVER_STATUS"), client $(describe_status "$PAIR_CLIENT_STATUS"))"
    print_client_server_logs
    failures=$((failures + 1))
  fi
}

# GID 3 is a host's IPv4 address on sv0, GID 4 its IPv6 address (after
# fe80::GUID, 127.0.0.1 and ::1).
PAIR_ENV=()
pair "rc pingpong, IPv4 GIDs" 2 1 198.18.0.2 -- ibv_rc_pingpong -g 3 -n 500 -c
# ibv_rc_pingpong exchanges its addresses over IPv4 TCP (it listens on the
# first address getaddrinfo gives); its QPs then use the IPv6 GIDs.
pair "rc pingpong, IPv6 GIDs" 3 1 198.18.0.3 -- ibv_rc_pingpong -g 4 -n 500 -c
pair "ud pingpong" 2 3 198.18.0.2 -- ibv_ud_pingpong -g 3 -n 500 -c
pair "ib_send_lat" 2 1 198.18.0.2 -- ib_send_lat -x 3 -n 1000
pair "ib_write_bw 64 KiB" 2 1 198.18.0.2 -- ib_write_bw -x 3 -s 65536 -n 300
# Under ThreadSanitizer (UDP_HOSTS_SKIP_FAULTS=1) the engine runs tens of
# times slower, past the ACK timeouts that loss relies on: the fault runs
# (this one and the soak) are for the other builds.
if [[ ${UDP_HOSTS_SKIP_FAULTS:-0} != 1 ]]; then
  PAIR_ENV=(SOFTVERBS_FAULTS=drop:p=0.02)
  pair "rc pingpong, 2% loss each way" 2 1 198.18.0.2 -- ibv_rc_pingpong -g 3 -n 300 -c
  PAIR_ENV=()
else
  echo "skipped under ThreadSanitizer: rc pingpong, 2% loss each way"
fi

# cm_pair LABEL "SERVER ARGS" "CLIENT ARGS" [PORT]: librdmacm programs, the
# server on host 2, the client on host 1 once the server listens; @PORT@
# becomes one RDMA CM port for the case (PORT: the program's own).
cm_pair() {
  local label=$1 port=${4:-$((20000 + RANDOM % 12000))}
  local -a server client
  read -r -a server <<<"${2//@PORT@/$port}"
  read -r -a client <<<"${3//@PORT@/$port}"
  local base="$logs/${label//[^A-Za-z0-9_.-]/_}"
  timeout --kill-after=5 60 "$cli" topo --name "$topo" exec 2 -- "$cli" run -- "${server[@]}" \
    >"$base.server.log" 2>&1 </dev/null &
  local server_pid=$! client_status=1 deadline=$((SECONDS + 30))
  until "$cli" topo --name "$topo" exec 2 -- "$cli" listeners 2>/dev/null | grep -q ":$port "; do
    if ! kill -0 "$server_pid" 2>/dev/null || ((SECONDS >= deadline)); then break; fi
    sleep 0.1
  done
  timeout --kill-after=5 60 "$cli" topo --name "$topo" exec 1 -- "$cli" run -- "${client[@]}" \
    >"$base.client.log" 2>&1 </dev/null
  client_status=$?
  ((client_status == 0)) || kill -TERM "$server_pid" 2>/dev/null
  wait "$server_pid"
  local server_status=$?
  if ((client_status == 0 && server_status == 0)); then
    echo "ok: $label"
  else
    echo "FAILED: $label (server $(describe_status "$server_status"), client $(describe_status "$client_status"))"
    sed 's/^/  server| /' "$base.server.log" | tail -15
    sed 's/^/  client| /' "$base.client.log" | tail -15
    failures=$((failures + 1))
  fi
}

# The connection manager between hosts: the request goes to the other
# host's QP1, which passes it to the listening process.
cm_pair "rping, data verified" "rping -s -a 198.18.0.2 -p @PORT@ -C 50 -V" \
  "rping -c -a 198.18.0.2 -p @PORT@ -C 50 -V"
cm_pair "rping over IPv6" "rping -s -a fd00:5376::2 -p @PORT@ -C 20 -V" \
  "rping -c -a fd00:5376::2 -p @PORT@ -C 20 -V"
cm_pair "rdma_server/rdma_client" "rdma_server -p @PORT@" "rdma_client -s 198.18.0.2 -p @PORT@"
cm_pair "rstream (rsockets)" "rstream -p @PORT@ -S 4096 -C 200" \
  "rstream -s 198.18.0.2 -p @PORT@ -S 4096 -C 200"
cm_pair "ib_send_lat -R" "ib_send_lat -R -d softverbs0 -p @PORT@ -n 1000" \
  "ib_send_lat -R -d softverbs0 -p @PORT@ -n 1000 198.18.0.2"
cm_pair "udaddy (SIDR)" "udaddy" "udaddy -s 198.18.0.2" 7174

# mckey with three hosts: receivers on hosts 2 and 3 join an IP multicast
# group, the sender on host 1 sends to it until both have their ten
# datagrams (a datagram sent before a receiver joined is lost, as on a
# network).
mckey_receivers=()
for host in 2 3; do
  timeout --kill-after=5 60 "$cli" topo --name "$topo" exec "$host" -- "$cli" run -- \
    mckey -m 239.1.2.3 -b "198.18.0.$host" -C 10 >"$logs/mckey.receiver$host.log" 2>&1 </dev/null &
  mckey_receivers+=($!)
done
for _ in $(seq 1 40); do
  sleep 0.25
  kill -0 "${mckey_receivers[0]}" 2>/dev/null || kill -0 "${mckey_receivers[1]}" 2>/dev/null || break
  timeout --kill-after=5 60 "$cli" topo --name "$topo" exec 1 -- "$cli" run -- \
    mckey -m 239.1.2.3 -b 198.18.0.1 -s -C 10 >>"$logs/mckey.sender.log" 2>&1 </dev/null
done
mckey_ok=yes
for pid in "${mckey_receivers[@]}"; do wait "$pid" || mckey_ok=no; done
if [[ $mckey_ok == yes ]]; then
  echo "ok: mckey, one sender and receivers on two other hosts"
else
  echo "FAILED: mckey across hosts"
  tail -5 "$logs"/mckey.*.log
  failures=$((failures + 1))
fi

# The RC integrity soak of the load tests between hosts 1 and 2, over the
# UDP wire, with its fault mix (loss, duplicates, reordering, corruption):
# every message checked, both sides intact, nothing held growing.
soak=$(dirname "$cli")/../load/soak
if [[ ${UDP_HOSTS_SKIP_FAULTS:-0} == 1 ]]; then
  echo "skipped under ThreadSanitizer: the RC integrity soak between two hosts"
elif SOFTVERBS_SHM_PREFIX=svudpsoak SOFTVERBS_FAULTS_FILE="$here/../load/soak-faults.plan" \
  timeout --kill-after=5 180 "$cli" run -- "$soak" --seconds 10 \
  --hosts "$topo-host1,$topo-host2" --gid-index 3 >"$logs/soak.log" 2>&1; then
  echo "ok: the RC integrity soak between two hosts under the fault mix ($(grep -c intact "$logs/soak.log") sides intact)"
else
  echo "FAILED: the RC integrity soak between two hosts"
  tail -12 "$logs/soak.log"
  failures=$((failures + 1))
fi

# A hostile host: host 3 sends crafted datagrams (right ICRCs with random
# PSNs, R_Keys and Q_Keys; truncated, unaligned, bad ICRC, empty, noise; to
# QP1 and the multicast QPN) to host 2, first while its pingpong server
# waits, then during the pingpong. The target counts every kind of drop,
# and the pingpong checks every buffer.
hostile=$(dirname "$cli")/../load/udp_hostile
if [[ -x $hostile ]]; then
  server_host=2
  PAIR_SERVER_NETNS=$topo-host$server_host
  port=$(free_tcp_port)
  timeout --kill-after=5 60 "$cli" topo --name "$topo" exec 2 -- "$cli" run -- \
    ibv_rc_pingpong -g 3 -n 2000 -c -p "$port" >"$logs/hostile.server.log" 2>&1 </dev/null &
  hostile_server=$!
  until tcp_port_is_listening "$port"; do
    kill -0 "$hostile_server" 2>/dev/null || break
    sleep 0.05
  done
  "$cli" topo --name "$topo" exec 3 -- "$hostile" --target 198.18.0.2 --source 198.18.0.3 \
    --rounds 50 >"$logs/hostile.sender.log" 2>&1
  stats=$("$cli" topo --name "$topo" exec 2 -- "$cli" stats 2>&1)
  # counter LINE NAME: the value on the stats line that starts with LINE.
  counter() { grep "^$1" <<<"$stats" | grep -o " $2=[0-9]*" | head -1 | cut -d= -f2; }
  for line_and_name in "udp: dropped_bad_icrc" "udp: dropped_malformed" "udp: dropped_not_here" \
    "wire: frames_unroutable" "device packets_dropped_unfit"; do
    read -r line name <<<"$line_and_name"
    if (($(counter "$line" "$name") > 0)); then
      echo "ok: the target counted $name=$(counter "$line" "$name")"
    else
      echo "FAILED: the target counted no $name"
      sed 's/^/  stats| /' <<<"$stats" | head -8
      failures=$((failures + 1))
    fi
  done
  "$cli" topo --name "$topo" exec 3 -- "$hostile" --target 198.18.0.2 --source 198.18.0.3 \
    --rounds 300 >>"$logs/hostile.sender.log" 2>&1 &
  hostile_sender=$!
  timeout --kill-after=5 60 "$cli" topo --name "$topo" exec 1 -- "$cli" run -- \
    ibv_rc_pingpong -g 3 -n 2000 -c -p "$port" 198.18.0.2 >"$logs/hostile.client.log" 2>&1 </dev/null
  client_status=$?
  wait "$hostile_sender"
  wait "$hostile_server"
  server_status=$?
  if ((client_status == 0 && server_status == 0)); then
    echo "ok: an rc pingpong with every buffer checked, under a hostile host's datagrams"
  else
    echo "FAILED: the pingpong under a hostile host (server $(describe_status "$server_status"), client $(describe_status "$client_status"))"
    tail -5 "$logs"/hostile.*.log
    failures=$((failures + 1))
  fi
else
  echo "FAILED: $hostile is missing (build the udp_hostile target)"
  failures=$((failures + 1))
fi

# A port nobody listens on, on a host where someone listens: refused at once.
timeout 60 "$cli" topo --name "$topo" exec 2 -- "$cli" run -- rping -s -a 198.18.0.2 -p 7174 -C 1 \
  >"$logs/refusal.server.log" 2>&1 </dev/null &
refusal_server=$!
until "$cli" topo --name "$topo" exec 2 -- "$cli" listeners 2>/dev/null | grep -q ":7174 "; do
  kill -0 "$refusal_server" 2>/dev/null || break
  sleep 0.1
done
timeout 30 "$cli" topo --name "$topo" exec 1 -- "$cli" run -- rping -c -a 198.18.0.2 -p 7175 -C 1 \
  >"$logs/refusal.client.log" 2>&1 </dev/null
if grep -q "RDMA_CM_EVENT_REJECTED" "$logs/refusal.client.log"; then
  echo "ok: a port nobody listens on is refused (REJECTED)"
else
  echo "FAILED: a connection to a port nobody listens on was not refused"
  sed 's/^/  client| /' "$logs/refusal.client.log"
  failures=$((failures + 1))
fi
kill -TERM "$refusal_server" 2>/dev/null
wait "$refusal_server" 2>/dev/null

if grep -q "Failed status" "$logs"/*.log; then
  echo "FAILED: a completion error was printed"
  failures=$((failures + 1))
fi
((failures == 0)) || exit 1
echo "all UDP wire pairs passed"
