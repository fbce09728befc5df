#!/usr/bin/env bash
# The UDP wire beside raw UDP and libfabric's udp provider, between two
# hosts of `softverbs topo` (network namespaces on this machine, jumbo
# frames), interleaved round by round, medians of ROUNDS (default 3).
# Prints a markdown table for docs/performance.md. Needs root.
#
#   sudo bash bench/udp-side-by-side.sh [BUILD_DIR]
#
# One-way latency of 8-byte messages: qperf udp_lat (raw UDP), fi_pingpong
# -p "udp;ofi_rxd" (libfabric), ib_send_lat -x 3 and ib_write_lat -x 3 on
# RoCE soft devices. Bandwidth: qperf udp_bw with 8 KiB datagrams,
# fi_pingpong with 64 KiB messages, ib_write_bw and ib_send_bw -s 65536.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=$(cd "${1:-build}" && pwd)
cli=$build/harness/cli/softverbs
rounds=${ROUNDS:-3}
if (($(id -u) != 0)); then
  echo "udp-side-by-side: needs root for network namespaces (softverbs topo)" >&2
  exit 1
fi
for tool in qperf fi_pingpong ib_send_lat ib_write_bw; do
  command -v $tool >/dev/null || { echo "$tool is missing; run scripts/setup.sh" >&2; exit 1; }
done

topo=svbench$$
export SOFTVERBS_LINK_LAYER=eth SOFTVERBS_SHM_PREFIX=svbench
raw=$(mktemp)
trap '"$cli" topo --name "$topo" down; rm -f "$raw"; pkill -f "qperf$" 2>/dev/null; true' EXIT
"$cli" topo --name "$topo" up 2 >/dev/null || exit 1
host() { local n=$1; shift; "$cli" topo --name "$topo" exec "$n" -- "$@"; }

# record WHAT VALUE UNIT
record() { [[ -n $2 ]] && echo "$1|$2|$3" >>"$raw"; }

# pair SERVER... -- CLIENT...: the server on host 2 in the background, the
# client on host 1; prints the client's output.
perftest_pair() {
  host 2 timeout 60 "$cli" run -- "$@" >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  host 1 timeout 60 "$cli" run -- "$@" 198.18.0.2 2>&1
  wait "$server"
}
fabric_pair() {
  host 2 timeout 60 fi_pingpong -p "udp;ofi_rxd" -e rdm "$@" >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  host 1 timeout 60 fi_pingpong -p "udp;ofi_rxd" -e rdm "$@" 198.18.0.2 2>&1
  wait "$server"
}

host 2 timeout 3000 qperf >/dev/null 2>&1 &
sleep 0.5
for round in $(seq 1 "$rounds"); do
  q=$(host 1 timeout 60 qperf 198.18.0.2 -m 8 udp_lat -m 8192 udp_bw)
  # qperf picks its units (us or ms, MB/sec or GB/sec): convert.
  record "latency raw UDP" "$(awk '/latency/ {print $3 * ($4 == "ms" ? 1000 : 1)}' <<<"$q")" us
  record "bandwidth raw UDP" "$(awk '/recv_bw/ {print $3 * ($4 ~ /^GB/ ? 1000 : 1)}' <<<"$q")" MB/s
  record "latency libfabric" "$(fabric_pair -I 2000 -S 8 | awk '$1 == 8 {print $7}')" us
  record "bandwidth libfabric" "$(fabric_pair -I 200 -S 65536 | awk '$1 ~ /^64k|^65536/ {print $6}')" MB/s
  record "latency softverbs send" "$(perftest_pair ib_send_lat -x 3 -s 8 -n 2000 | awk '$1 == 8 {print $5}')" us
  record "latency softverbs write" "$(perftest_pair ib_write_lat -x 3 -s 8 -n 2000 | awk '$1 == 8 {print $5}')" us
  record "bandwidth softverbs write" "$(perftest_pair ib_write_bw -x 3 -s 65536 -n 2000 | awk '$1 == 65536 {print $4}')" MB/s
  record "bandwidth softverbs send" "$(perftest_pair ib_send_bw -x 3 -s 65536 -n 2000 | awk '$1 == 65536 {print $4}')" MB/s
done

python3 - "$raw" <<'PY'
import collections, statistics, sys
values = collections.defaultdict(list)
units = {}
for line in open(sys.argv[1]):
    what, value, unit = line.strip().split("|")
    try:
        values[what].append(float(value))
        units[what] = unit
    except ValueError:
        pass
def cell(what):
    if what not in values:
        return "—"
    return f"{statistics.median(values[what]):.1f} {units[what]}"
print("| between two namespace hosts | raw UDP (qperf) | libfabric udp;ofi_rxd | softverbs RoCE |")
print("|---|---|---|---|")
print(f"| one-way latency, 8 B | {cell('latency raw UDP')} | {cell('latency libfabric')} | "
      f"send {cell('latency softverbs send')}, write {cell('latency softverbs write')} |")
print(f"| bandwidth | {cell('bandwidth raw UDP')} (8 KiB datagrams) | {cell('bandwidth libfabric')} (64 KiB) | "
      f"write {cell('bandwidth softverbs write')}, send {cell('bandwidth softverbs send')} (64 KiB) |")
PY
