#!/usr/bin/env bash
# The conformance suite between two hosts: RoCE soft devices in two network
# namespaces made by `softverbs topo`, over the UDP wire. Host 2 serves the
# peers (`conformance_tests --serve-peers`, bounded in time); host 1 runs
# the tests with `--peer`, so every two-process test has its other side on
# the other host. The topology is removed however the test ends.
#
# Needs root (network namespaces): otherwise it exits 77, which ctest
# reports as skipped.
#
# Usage: conformance_hosts_test.sh PATH/TO/softverbs PATH/TO/conformance_tests [GTEST ARGS...]
set -uo pipefail

cli=${1:?usage: conformance_hosts_test.sh PATH/TO/softverbs PATH/TO/conformance_tests}
suite=${2:?usage: conformance_hosts_test.sh PATH/TO/softverbs PATH/TO/conformance_tests}
shift 2

if (($(id -u) != 0)); then
  echo "skipped: needs root for network namespaces (softverbs topo)"
  exit 77
fi

topo=svc$$
port=18515
gid_index=3  # the IPv4 address of the host's sv0 (softverbs devices -v lists them)
export SOFTVERBS_LINK_LAYER=eth SOFTVERBS_UDP=1
export SOFTVERBS_SHM_PREFIX=${SOFTVERBS_SHM_PREFIX:-svconfhosts}
server_log=$(mktemp)
cleanup() {
  "$cli" topo --name "$topo" down
  rm -f "$server_log" /dev/shm/"$SOFTVERBS_SHM_PREFIX"-*
}
trap cleanup EXIT
"$cli" topo --name "$topo" up 2 >/dev/null || { echo "softverbs topo up failed"; exit 1; }

"$cli" topo --name "$topo" exec 2 -- timeout 1200 "$cli" run -- "$suite" \
  --gid-index "$gid_index" --serve-peers "$port" --serve-seconds 1100 >"$server_log" 2>&1 &
server=$!
for _ in $(seq 100); do
  grep -q "serving test peers" "$server_log" && break
  sleep 0.1
done

"$cli" topo --name "$topo" exec 1 -- timeout 1100 "$cli" run -- "$suite" \
  --gid-index "$gid_index" --peer "198.18.0.2:$port" "$@"
status=$?
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null
if ((status != 0)); then
  echo "--- the peer server on host 2:"
  grep -v ": done$" "$server_log" | tail -40
fi
exit $status
