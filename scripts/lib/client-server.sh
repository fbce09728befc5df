# shellcheck shell=bash
# Shell helpers to run a TCP server/client pair of test programs on this host
# (ibv_rc_pingpong, perftest), each side bounded in time. Source this file.
#
#   SERVER_CMD=(softverbs run -- ibv_rc_pingpong -d softverbs0 -p @PORT@)
#   CLIENT_CMD=(softverbs run -- ibv_rc_pingpong -d softverbs0 -p @PORT@ localhost)
#   run_client_server "label" 60
#
# @PORT@ is replaced by a TCP port nobody listens on. Afterwards
# $PAIR_SERVER_LOG / $PAIR_CLIENT_LOG name the two sides' output files,
# $PAIR_SERVER_STATUS / $PAIR_CLIENT_STATUS hold their exit statuses (124:
# timed out), and the function's status is 0 only when both succeeded.

# Is anyone listening on this TCP port (IPv4 or IPv6)? Reads /proc instead of
# connecting, because a probing connection would be taken by the server as
# its one client. With PAIR_SERVER_NETNS set, in that network namespace
# (a `softverbs topo` host).
tcp_port_is_listening() {
  local hex in_netns=()
  hex=$(printf ':%04X' "$1")
  [[ -n ${PAIR_SERVER_NETNS:-} ]] && in_netns=(ip netns exec "$PAIR_SERVER_NETNS")
  "${in_netns[@]}" awk -v port="$hex" '$4 == "0A" && substr($2, length($2) - 4) == port { found = 1 }
                      END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Prints a TCP port that nobody listens on now, below the kernel's range of
# ephemeral ports: one in that range may be the local end of any connection
# on the host, and the server's bind would fail.
free_tcp_port() {
  local port low=32768 high=60999
  read -r low high </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  ((low > 11000)) || low=32768
  for _ in $(seq 1 100); do
    port=$((10000 + RANDOM % (low - 10000)))
    if ! tcp_port_is_listening "$port"; then
      echo "$port"
      return 0
    fi
  done
  echo "no free TCP port found" >&2
  return 1
}

PAIR_LOG_DIR=${PAIR_LOG_DIR:-}

run_client_server() {
  local label=$1 limit=$2 port
  port=$(free_tcp_port) || return 1
  if [[ -z $PAIR_LOG_DIR ]]; then
    PAIR_LOG_DIR=$(mktemp -d)
  fi
  local safe_label=${label//[^A-Za-z0-9_.-]/_}
  PAIR_SERVER_LOG="$PAIR_LOG_DIR/$safe_label.server.log"
  PAIR_CLIENT_LOG="$PAIR_LOG_DIR/$safe_label.client.log"
  local server=("${SERVER_CMD[@]//@PORT@/$port}")
  local client=("${CLIENT_CMD[@]//@PORT@/$port}")

  timeout --kill-after=5 "$limit" "${server[@]}" >"$PAIR_SERVER_LOG" 2>&1 </dev/null &
  local server_pid=$!

  # The server listens only once its device and QP are set up.
  local deadline=$((SECONDS + limit))
  until tcp_port_is_listening "$port"; do
    if ! kill -0 "$server_pid" 2>/dev/null || ((SECONDS >= deadline)); then
      break
    fi
    sleep 0.05
  done

  if tcp_port_is_listening "$port"; then
    timeout --kill-after=5 "$limit" "${client[@]}" >"$PAIR_CLIENT_LOG" 2>&1 </dev/null
    PAIR_CLIENT_STATUS=$?
  else
    echo "(not started: the server never listened on port $port)" >"$PAIR_CLIENT_LOG"
    PAIR_CLIENT_STATUS=1
  fi
  if ((PAIR_CLIENT_STATUS != 0)); then
    # A server whose client is gone would wait for it until its time is up.
    sleep 1
    kill -TERM "$server_pid" 2>/dev/null
  fi
  wait "$server_pid"
  PAIR_SERVER_STATUS=$?
  ((PAIR_SERVER_STATUS == 0 && PAIR_CLIENT_STATUS == 0))
}

# Describes an exit status the way a reader wants it.
describe_status() {
  case $1 in
    0) echo "ok" ;;
    124) echo "timed out" ;;
    137) echo "killed after timing out" ;;
    *) echo "failed with status $1" ;;
  esac
}

# Prints both sides' output, each line prefixed by its side.
print_client_server_logs() {
  sed 's/^/  server| /' "$PAIR_SERVER_LOG"
  sed 's/^/  client| /' "$PAIR_CLIENT_LOG"
}
