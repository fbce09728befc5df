#!/usr/bin/env bash
# `softverbs capture`: an unmodified ibv_rc_pingpong pair captured on an
# InfiniBand device and on a RoCE device, and an rping pair (librdmacm, CM
# messages on QP1's stand-in) on RoCE; tshark must read every packet as
# RoCEv2 with the opcodes, PSNs and QPNs the programs exchanged, none
# malformed, and the packets a fault plan dropped or corrupted must carry a
# comment saying so. Filters (--qp) are checked too, and a capture of a
# program already running (--pid).
#
# Needs tshark (scripts/setup.sh installs it).
#
# Usage: capture_test.sh PATH/TO/softverbs
set -uo pipefail
# Every program here stays on this host: no UDP wire onto its network.
export SOFTVERBS_UDP=0

cli=${1:?usage: capture_test.sh PATH/TO/softverbs}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/client-server.sh
source "$here/../../scripts/lib/client-server.sh"
export SOFTVERBS_SHM_PREFIX=${SOFTVERBS_SHM_PREFIX:-svcapture}
for tool in tshark ibv_rc_pingpong rping; do
  command -v $tool >/dev/null || { echo "$tool is missing; run scripts/setup.sh"; exit 1; }
done

logs=$(mktemp -d)
PAIR_LOG_DIR=$logs
trap 'rm -rf "$logs"; rm -f /dev/shm/$SOFTVERBS_SHM_PREFIX-*' EXIT
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

# fields FILE FIELD...: one line per packet, tab-separated.
fields() {
  local file=$1
  shift
  local args=()
  for f in "$@"; do args+=(-e "$f"); done
  tshark -r "$file" -T fields "${args[@]}" 2>/dev/null
}

# check_pingpong LABEL FILE MESSAGES: the server's capture of an RC pingpong
# of MESSAGES round trips: as many SEND ONLY (opcode 4) each way as
# messages, ACKs (17), and PSNs that run in order from each side.
check_pingpong() {
  local label=$1 file=$2 messages=$3
  local total sends acks malformed
  total=$(fields "$file" frame.number | wc -l)
  sends=$(fields "$file" infiniband.bth.opcode | grep -cx 4)
  acks=$(fields "$file" infiniband.bth.opcode | grep -cx 17)
  malformed=$(fields "$file" _ws.malformed | grep -c .)
  if ((total == 0)); then fail "$label: nothing captured"; return; fi
  ((malformed == 0)) || fail "$label: $malformed malformed packets"
  ((sends >= 2 * messages)) || fail "$label: $sends SEND packets, expected $((2 * messages))"
  ((acks >= 2 * messages)) || fail "$label: $acks ACKs, expected $((2 * messages))"
  fields "$file" udp.dstport | grep -qvx 4791 && fail "$label: a packet not to UDP port 4791"
  # Each QP's SENDs carry consecutive PSNs.
  fields "$file" infiniband.bth.opcode infiniband.bth.destqp infiniband.bth.psn |
    awk -F'\t' '$1 == 4 { if (($2 in last) && $3 != last[$2] + 1) bad = 1; last[$2] = $3 }
                END { exit bad }' || fail "$label: SEND PSNs out of order"
  echo "ok: $label ($total packets: $sends SENDs, $acks ACKs)"
}

pingpong_capture() {
  local label=$1 file=$2
  shift 2
  SERVER_CMD=("$cli" capture -o "$file" -- ibv_rc_pingpong -p @PORT@ -n 20 -s 64 "$@")
  CLIENT_CMD=("$cli" run -- ibv_rc_pingpong -p @PORT@ -n 20 -s 64 "$@" localhost)
  if ! run_client_server "$label" 60; then
    fail "$label: the pingpong failed"
    print_client_server_logs
    return 1
  fi
}

pingpong_capture "ib pingpong" "$logs/ib.pcapng" && check_pingpong "InfiniBand device" "$logs/ib.pcapng" 20
SOFTVERBS_LINK_LAYER=eth pingpong_capture "roce pingpong" "$logs/roce.pcapng" -g 1 &&
  check_pingpong "RoCE device" "$logs/roce.pcapng" 20
if [[ -f $logs/roce.pcapng ]]; then
  fields "$logs/roce.pcapng" ip.src ip.dst | grep -qvx $'127.0.0.1\t127.0.0.1' &&
    fail "RoCE device: a packet not between the GIDs' addresses (127.0.0.1)"
fi

# Faults: the server's first drop and first corruption of a sent packet.
# Messages of 4000 bytes, so the packets are mostly payload: a bit flipped
# in a GRH's addresses leaves a packet no RoCE capture can show (its IPv4
# address becomes an IPv6 one), and which bit flips is the seed's choice.
SOFTVERBS_LINK_LAYER=eth SOFTVERBS_FAULTS="drop:dir=tx,nth=3,limit=1;corrupt:dir=tx,nth=6,limit=1" \
  pingpong_capture "faulty pingpong" "$logs/faults.pcapng" -g 1 -s 4000
if [[ -f $logs/faults.pcapng ]]; then
  comments=$(fields "$logs/faults.pcapng" frame.comment)
  grep -q "dropped by the fault plan" <<<"$comments" || fail "faults: no packet marked dropped"
  grep -q "corrupted by the fault plan" <<<"$comments" || fail "faults: no packet marked corrupted"
  echo "ok: faults marked ($(grep -c . <<<"$comments") comments)"
fi

# --qp: only packets addressed to the server's QP.
SERVER_CMD=("$cli" capture -o "$logs/one-qp.pcapng" --qp 2 -- ibv_rc_pingpong -p @PORT@ -n 5)
CLIENT_CMD=("$cli" run -- ibv_rc_pingpong -p @PORT@ -n 5 localhost)
if run_client_server "qp filter" 60; then
  others=$(fields "$logs/one-qp.pcapng" infiniband.bth.destqp | grep -cvx 0x000002)
  packets=$(fields "$logs/one-qp.pcapng" frame.number | wc -l)
  if ((packets == 0 || others != 0)); then
    fail "--qp 2 kept $packets packets, $others of them to other QPs"
  else
    echo "ok: --qp 2 kept only its $packets packets"
  fi
else
  fail "qp filter pingpong failed"
fi

# librdmacm: rping's CM messages and data (RDMA READs), on RoCE.
port=$((20000 + RANDOM % 12000))
SOFTVERBS_LINK_LAYER=eth timeout 60 "$cli" capture -o "$logs/rping.pcapng" -- \
  rping -s -a 127.0.0.1 -p "$port" -C 5 -V >"$logs/rping.server" 2>&1 &
rping_server=$!
until "$cli" listeners 2>/dev/null | grep -q ":$port "; do
  kill -0 "$rping_server" 2>/dev/null || break
  sleep 0.1
done
SOFTVERBS_LINK_LAYER=eth timeout 60 "$cli" run -- rping -c -a 127.0.0.1 -p "$port" -C 5 -V \
  >"$logs/rping.client" 2>&1 || fail "rping client"
wait "$rping_server" || fail "rping server"
if [[ -f $logs/rping.pcapng ]]; then
  # CM MADs travel between the processes' CM agents as UD SENDs with the
  # general services Q_Key.
  cm=$(fields "$logs/rping.pcapng" infiniband.deth.q_key | grep -c 0x0000000080010000)
  malformed=$(fields "$logs/rping.pcapng" _ws.malformed | grep -c .)
  reads=$(fields "$logs/rping.pcapng" infiniband.bth.opcode | grep -cx 12)
  if ((cm < 3 || malformed != 0 || reads == 0)); then
    fail "rping capture: $cm CM MADs, $reads READ requests, $malformed malformed"
  else
    echo "ok: rping capture ($cm CM MADs, $reads RDMA READ requests)"
  fi
fi

# --pid: a pingpong pair already running is captured for a second and goes
# on afterwards; the file holds the SENDs and ACKs of that second, none
# malformed, and grows no more once the capture stopped.
port=$(free_tcp_port)
"$cli" run -- ibv_rc_pingpong -p "$port" -n 100000000 -s 64 >"$logs/live.server" 2>&1 &
live_server=$!
until tcp_port_is_listening "$port"; do
  kill -0 "$live_server" 2>/dev/null || break
  sleep 0.05
done
"$cli" run -- ibv_rc_pingpong -p "$port" -n 100000000 -s 64 localhost >"$logs/live.client" 2>&1 &
live_client=$!
for _ in $(seq 1 100); do
  "$cli" stats --pid "$live_server" 2>/dev/null | grep -q "^engine: frames_sent=[1-9]" && break
  sleep 0.1
done
live=$logs/live.pcapng
if ! timeout 30 "$cli" capture --pid "$live_server" -o "$live" --seconds 1 >"$logs/live.capture" 2>&1; then
  fail "capture --pid: $(cat "$logs/live.capture")"
elif ! grep -q "^ok: [1-9][0-9]* packets written to $live" "$logs/live.capture"; then
  fail "capture --pid wrote nothing: $(cat "$logs/live.capture")"
else
  size=$(stat -c %s "$live")
  sleep 0.5
  kill -0 "$live_server" 2>/dev/null || fail "capture --pid: the captured program ended"
  ((size == $(stat -c %s "$live"))) || fail "capture --pid: the file grew after the capture stopped"
  sends=$(fields "$live" infiniband.bth.opcode | grep -cx 4)
  acks=$(fields "$live" infiniband.bth.opcode | grep -cx 17)
  malformed=$(fields "$live" _ws.malformed | grep -c .)
  if ((sends == 0 || acks == 0 || malformed != 0)); then
    fail "capture --pid: $sends SENDs, $acks ACKs, $malformed malformed"
  else
    echo "ok: capture --pid of a running pingpong ($sends SENDs, $acks ACKs, it goes on)"
  fi
fi
# Only one capture at a time; a process that is not there is reported.
"$cli" capture --pid "$live_server" -o "$logs/second.pcapng" --seconds 2 >"$logs/second.out" 2>&1 &
first_capture=$!
until grep -q "capturing" "$logs/second.out"; do
  kill -0 "$first_capture" 2>/dev/null || break
  sleep 0.05
done
if "$cli" capture --pid "$live_server" -o "$logs/third.pcapng" --seconds 1 >"$logs/third.out" 2>&1 ||
  ! grep -q "already captures" "$logs/third.out"; then
  fail "a second capture of one process was not refused: $(cat "$logs/third.out")"
fi
wait "$first_capture" || fail "the first of two captures failed"
kill -TERM "$live_server" "$live_client" 2>/dev/null
wait "$live_server" "$live_client" 2>/dev/null
if "$cli" capture --pid "$live_server" -o "$logs/gone.pcapng" --seconds 1 2>"$logs/gone.err"; then
  fail "capture --pid of an ended process succeeded"
else
  echo "ok: capture --pid of an ended process fails: $(head -1 "$logs/gone.err")"
fi

((failures == 0)) || exit 1
echo "all capture checks passed"
