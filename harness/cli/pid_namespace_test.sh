#!/usr/bin/env bash
# Two processes in different PID namespaces that share /dev/shm, as two
# containers sharing it do: each has its own pids (both run as pid 1), so
# neither may judge the other's liveness by pid. An ibv_rc_pingpong pair
# and an ibv_ud_pingpong pair run between them with every message checked,
# and a server killed in its namespace is found dead from the other: a
# new pair reuses its slot at once.
#
# Needs root and unshare(1) (PID and mount namespaces): otherwise it exits
# 77, which ctest reports as skipped. Every program runs under timeout(1).
#
# Usage: pid_namespace_test.sh PATH/TO/softverbs
set -uo pipefail

cli=${1:?usage: pid_namespace_test.sh PATH/TO/softverbs}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export SOFTVERBS_SHM_PREFIX=${SOFTVERBS_SHM_PREFIX:-svpidns}
# shellcheck source=../../scripts/lib/client-server.sh
source "$here/../../scripts/lib/client-server.sh"

if (($(id -u) != 0)); then
  echo "skipped: needs root for PID namespaces (unshare --pid)"
  exit 77
fi
if ! command -v unshare >/dev/null || ! timeout 10 unshare --pid --fork --mount-proc true 2>/dev/null; then
  echo "skipped: unshare --pid --fork --mount-proc is unavailable here"
  exit 77
fi
for tool in ibv_rc_pingpong ibv_ud_pingpong; do
  command -v $tool >/dev/null || { echo "$tool is missing (package ibverbs-utils); run scripts/setup.sh"; exit 1; }
done

logs=$(mktemp -d)
trap 'rm -rf "$logs"; rm -f /dev/shm/$SOFTVERBS_SHM_PREFIX-*' EXIT
failures=0

# in_namespace CMD...: CMD under softverbs run, as pid 1 of a new PID namespace.
in_namespace() {
  timeout --kill-after=5 60 unshare --pid --fork --mount-proc "$cli" run -- "$@"
}

# pair NAME PROGRAM ARGS...: server and client in two namespaces; both must
# finish with status 0 and print their iteration line.
pair() {
  local name=$1 program=$2
  shift 2
  local port
  port=$(free_tcp_port) || return 1
  in_namespace "$program" -d softverbs0 -g 0 -p "$port" -c "$@" >"$logs/$name.server" 2>&1 &
  local server=$!
  sleep 0.5
  in_namespace "$program" -d softverbs0 -g 0 -p "$port" -c "$@" 127.0.0.1 >"$logs/$name.client" 2>&1
  local client_status=$?
  wait "$server"
  local server_status=$?
  if ((client_status != 0 || server_status != 0)) || ! grep -q 'iters in' "$logs/$name.client"; then
    echo "FAIL: $name (client $client_status, server $server_status)"
    tail -5 "$logs/$name.server" "$logs/$name.client"
    failures=$((failures + 1))
  else
    echo "ok: $name"
  fi
}

pair rc ibv_rc_pingpong -n 500 -s 4096
pair ud ibv_ud_pingpong -n 500 -s 1024

# A server killed in its namespace: the next pair finds its slot free.
port=$(free_tcp_port)
in_namespace ibv_rc_pingpong -d softverbs0 -g 0 -p "$port" >"$logs/killed.server" 2>&1 &
victim=$!
sleep 1
pkill -KILL -f "ibv_rc_pingpong -d softverbs0 -g 0 -p $port\$"  # pid 1 of its namespace
wait "$victim" 2>/dev/null
pair after_kill ibv_rc_pingpong -n 200

echo "$failures failed"
((failures == 0))
