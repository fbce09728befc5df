#!/usr/bin/env bash
# Protocol traces (softverbs run --trace, softverbs trace diff): runs of
# unmodified programs under a fault plan take the same path from the same
# seed, whatever else the host does, and another seed takes another.
#
#   - an ibv_rc_pingpong pair, three times with seed 7: alone, beside two
#     busy loops, and after an unrelated traced pair started first; then
#     once with seed 8
#   - an ib_send_bw pair (streaming: go back N after each loss), twice with
#     seed 7, once beside two busy loops
#   - ud_echo (UD: lost datagrams sent again after a wait), twice with seed
#     7, once beside two busy loops, then once with seed 8
#   - as root: an ibv_rc_pingpong pair between two `softverbs topo` hosts
#     (the UDP wire, RoCE), twice with seed 7 and once with seed 8
#   - a killed program's trace is read up to its last event
#   - misuse of `softverbs trace` says what to type
#
# Usage: trace_test.sh PATH/TO/softverbs PATH/TO/ud_echo
set -uo pipefail
export SOFTVERBS_UDP=0

cli=${1:?usage: trace_test.sh PATH/TO/softverbs PATH/TO/ud_echo}
ud_echo=${2:?usage: trace_test.sh PATH/TO/softverbs PATH/TO/ud_echo}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/client-server.sh
source "$here/../../scripts/lib/client-server.sh"
# shellcheck source=../../scripts/lib/busy-loops.sh
source "$here/../../scripts/lib/busy-loops.sh"
export SOFTVERBS_SHM_PREFIX=${SOFTVERBS_SHM_PREFIX:-svtrace}
for tool in ibv_rc_pingpong ib_send_bw; do
  command -v $tool >/dev/null || { echo "$tool is missing; run scripts/setup.sh"; exit 1; }
done

work=$(mktemp -d)
PAIR_LOG_DIR=$work
topo=
trap 'stop_busy_loops; [[ -n $topo ]] && "$cli" topo --name "$topo" down >/dev/null 2>&1; rm -rf "$work"; rm -f /dev/shm/$SOFTVERBS_SHM_PREFIX-*' EXIT
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

# traced_pair DIR SEED PLAN PROGRAM ARGS...: a server and a client of
# PROGRAM under PLAN with SEED, each traced into DIR.
traced_pair() {
  local dir=$1 seed=$2 plan=$3
  shift 3
  SERVER_CMD=(env "SOFTVERBS_FAULTS=$plan" "$cli" run --seed "$seed" --trace "$dir" -- "$@"
              -p @PORT@)
  CLIENT_CMD=(env "SOFTVERBS_FAULTS=$plan" "$cli" run --seed "$seed" --trace "$dir" -- "$@"
              -p @PORT@ localhost)
  if ! run_client_server "trace $dir" 120; then
    fail "$dir: the pair failed (server $PAIR_SERVER_STATUS, client $PAIR_CLIENT_STATUS)"
    tail -5 "$PAIR_SERVER_LOG" "$PAIR_CLIENT_LOG"
    return 1
  fi
  grep -q "fault plan seed $seed" "$PAIR_CLIENT_LOG" ||
    fail "$dir: softverbs run did not say the seed in force"
}

# same DIR_A DIR_B / differ DIR_A DIR_B: what `softverbs trace diff` says.
same() {
  local out
  out=$("$cli" trace diff "$1" "$2")
  local status=$?
  if ((status != 0)); then
    fail "$1 and $2 should have taken the same path (status $status)"
    echo "$out" | head -20
  fi
}
differ() {
  local out
  out=$("$cli" trace diff "$1" "$2")
  local status=$?
  ((status == 1)) || fail "$1 and $2 should differ (status $status)"
  echo "$out" | grep -q "the runs part at event" || fail "trace diff did not say where $1 and $2 part"
}

pingpong=(ibv_rc_pingpong -d softverbs0 -g 0 -n 200)
drops='drop:p=0.05'

traced_pair "$work/pp1" 7 "$drops" "${pingpong[@]}"
start_busy_loops 2
traced_pair "$work/pp2" 7 "$drops" "${pingpong[@]}"
stop_busy_loops
# An unrelated pair starts first and is still running: other QPNs, other
# processes on the host.
other_port=$(free_tcp_port)
SOFTVERBS_TRACE=$work/other timeout 60 "$cli" run -- ibv_rc_pingpong -d softverbs0 -g 0 \
  -n 100000 -p "$other_port" >/dev/null 2>&1 &
other_server=$!
for _ in $(seq 1 100); do
  tcp_port_is_listening "$other_port" && break
  sleep 0.1
done
SOFTVERBS_TRACE=$work/other timeout 60 "$cli" run -- ibv_rc_pingpong -d softverbs0 -g 0 \
  -n 100000 -p "$other_port" localhost >/dev/null 2>&1 &
other_client=$!
traced_pair "$work/pp3" 7 "$drops" "${pingpong[@]}"
kill "$other_client" "$other_server" 2>/dev/null
wait "$other_client" "$other_server" 2>/dev/null
traced_pair "$work/pp4" 8 "$drops" "${pingpong[@]}"

for f in "$work"/pp1/*; do
  [[ -s $f ]] || fail "empty trace $f"
done
(($(ls "$work/pp1" | wc -l) == 6)) || fail "expected 6 traces (3 parts of 2 QPs) in pp1: $(ls "$work/pp1")"
grep -q '^fault drop' "$work"/pp1/* || fail "no fault in the traces of a run under $drops"
grep -q '^timeout ' "$work"/pp1/*.completer || fail "no local ACK timeout traced"
same "$work/pp1" "$work/pp2"
same "$work/pp1" "$work/pp3"
differ "$work/pp1" "$work/pp4"

# Streaming: after each loss the requester goes back N; how far it had gone
# past the lost packet is the host's timing, the path is not.
bw=(ib_send_bw -d softverbs0 -n 2000 -s 8192)
traced_pair "$work/bw1" 7 'drop:p=0.02' "${bw[@]}"
start_busy_loops 2
traced_pair "$work/bw2" 7 'drop:p=0.02' "${bw[@]}"
stop_busy_loops
grep -q '^go-back ' "$work"/bw1/*.completer || fail "no go back N traced in the streaming run"
same "$work/bw1" "$work/bw2"

# Datagrams: what is lost is the seed's, and so is what is sent again.
# traced_ud DIR SEED: sets $ud_outcome, what the client said.
traced_ud() {
  local dir=$1 seed=$2 out
  if ! out=$(SOFTVERBS_FAULTS=$drops timeout 120 "$cli" run --seed "$seed" --trace "$dir" -- \
        "$ud_echo" --messages 200 2>&1); then
    fail "$dir: ud_echo failed: $out"
  fi
  ud_outcome=$(grep -o 'client: .*' <<<"$out")
}
traced_ud "$work/ud1" 7
ud1=$ud_outcome
start_busy_loops 2
traced_ud "$work/ud2" 7
ud2=$ud_outcome
stop_busy_loops
traced_ud "$work/ud3" 8
[[ $ud1 == *"sends again"* && $ud1 != *" 0 sends again"* ]] ||
  fail "ud_echo under $drops sent nothing again: '$ud1'"
[[ $ud1 == "$ud2" ]] || fail "ud_echo with seed 7: '$ud1', then '$ud2'"
grep -q '^fault drop' "$work"/ud1/* || fail "no fault in the UD traces"
same "$work/ud1" "$work/ud2"
differ "$work/ud1" "$work/ud3"

# Between two hosts of a topology (network namespaces: root only).
if [[ -n ${TRACE_TEST_SKIP_HOSTS:-} ]]; then
  echo "skipped the pair between hosts (TRACE_TEST_SKIP_HOSTS: a sanitizer build)"
elif ((EUID == 0)) && command -v ip >/dev/null; then
  topo=svtr$$
  if "$cli" topo --name "$topo" up 2 >/dev/null; then
    PAIR_SERVER_NETNS=$topo-host2  # where the server's TCP port is looked for
    hosts_pair() {
      local dir=$1 seed=$2
      SERVER_CMD=(env "SOFTVERBS_FAULTS=$drops" SOFTVERBS_LINK_LAYER=eth SOFTVERBS_UDP=1
                  "$cli" topo --name "$topo" exec 2 -- "$cli" run --seed "$seed" --trace "$dir" --
                  ibv_rc_pingpong -g 3 -n 200 -p @PORT@)
      CLIENT_CMD=(env "SOFTVERBS_FAULTS=$drops" SOFTVERBS_LINK_LAYER=eth SOFTVERBS_UDP=1
                  "$cli" topo --name "$topo" exec 1 -- "$cli" run --seed "$seed" --trace "$dir" --
                  ibv_rc_pingpong -g 3 -n 200 -p @PORT@ 198.18.0.2)
      run_client_server "trace $dir" 120 ||
        fail "$dir: the pair between hosts failed (server $PAIR_SERVER_STATUS, client $PAIR_CLIENT_STATUS)"
    }
    hosts_pair "$work/hosts1" 7
    hosts_pair "$work/hosts2" 7
    hosts_pair "$work/hosts3" 8
    "$cli" topo --name "$topo" down
    unset PAIR_SERVER_NETNS
    same "$work/hosts1" "$work/hosts2"
    differ "$work/hosts1" "$work/hosts3"
  else
    fail "softverbs topo up failed"
  fi
else
  echo "skipped the pair between hosts: needs root for network namespaces (softverbs topo)"
fi

# A killed program leaves its trace readable up to its last event.
mkdir -p "$work/killed"
cp "$work"/pp1/* "$work/killed/"
for f in "$work"/killed/*; do
  truncate -s $(($(stat -c %s "$f") + 65536)) "$f"  # the zero bytes a killed mapping leaves
done
same "$work/pp1" "$work/killed"

# Misuse.
expect_usage() {
  local out status
  out=$("$cli" "$@" 2>&1)
  status=$?
  ((status == 2)) || fail "softverbs $*: status $status, expected 2"
  echo "$out" | grep -q "softverbs trace diff DIR_A DIR_B\|holds no protocol trace\|cannot read" ||
    fail "softverbs $*: no hint in: $out"
}
expect_usage trace
expect_usage trace show
expect_usage trace diff "$work/pp1"
expect_usage trace diff "$work/pp1" "$work/none"
expect_usage trace diff "$work/pp1" /
"$cli" trace --help | grep -q 'usage: softverbs trace diff' || fail "trace --help"
out=$("$cli" run --trace 2>&1)
grep -q -- '--trace needs a directory' <<<"$out" || fail "run --trace without a directory: $out"
touch "$work/file"
out=$("$cli" run --trace "$work/file" -- true 2>&1)
grep -q 'cannot make the directory' <<<"$out" || fail "run --trace onto a file: $out"

if ((failures)); then
  echo "$failures failures"
  exit 1
fi
echo "trace: every check passed"
