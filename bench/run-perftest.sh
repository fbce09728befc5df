#!/usr/bin/env bash
# Measures softverbs end to end and writes a markdown summary:
#   1. perftest's ib_send_lat, ib_write_lat and ib_write_bw, unmodified, on
#      softverbs0 (server and client on localhost, two processes);
#   2. softverbs_bench: the machine's own limits (a cache line hop between two
#      processes, memcpy) and RC ping-pong / bandwidth through the verbs API.
# bench/README.md explains how to read the result.
#
# Usage: bench/run-perftest.sh [BUILD_DIR] [--out FILE] [--sizes "8 4096 ..."]
#   BUILD_DIR  default build/ (made by scripts/build.sh)
#   --out      where the summary goes (default BUILD_DIR/bench/summary.md)
#   --sizes    message sizes in bytes (default "8 64 512 4096 65536 1048576")
#   PERFTEST_TIMEOUT  seconds for each perftest process (default 120)
#   BENCH_FILTER      --benchmark_filter for softverbs_bench (default: all)
#   BENCH_TIMEOUT     seconds for softverbs_bench (default 1200)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/lib/client-server.sh"

build_dir="$root/build"
out=
sizes="8 64 512 4096 65536 1048576"
while (($# > 0)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run-perftest: unknown option $1 (try --help)" >&2; exit 2 ;;
    *) build_dir=$(realpath -m "$1"); shift ;;
  esac
done
out=${out:-$build_dir/bench/summary.md}
mkdir -p "$(dirname "$out")"

cli="$build_dir/harness/cli/softverbs"
bench="$build_dir/bench/softverbs_bench"
[[ -x $cli ]] || { echo "run-perftest: $cli is not built; run scripts/build.sh" >&2; exit 1; }
for tool in ib_send_lat ib_write_lat ib_write_bw; do
  command -v $tool >/dev/null ||
    { echo "run-perftest: $tool is missing (package perftest); run scripts/setup.sh" >&2; exit 1; }
done

limit=${PERFTEST_TIMEOUT:-120}
PAIR_LOG_DIR=$(mktemp -d)
trap 'rm -rf "$PAIR_LOG_DIR"' EXIT
export SOFTVERBS_SHM_PREFIX=${SOFTVERBS_SHM_PREFIX:-svbench}

# perftest prints one result row per size: the first two columns are the
# size and the iteration count, both plain numbers.
result_row() {
  awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 5 { row = $0 } END { print row }' "$1"
}

first_error() {
  grep -m1 -iE 'error|fail|couldn|unable|not supported|invalid|timed out' "$1" ||
    tail -n1 "$1"
}

latency_rows=()
bandwidth_rows=()
failures=0

for tool in ib_send_lat ib_write_lat ib_write_bw; do
  for size in $sizes; do
    if [[ $tool == ib_write_bw ]]; then
      # Enough to fill the pipe, bounded to about 512 MiB per size.
      iterations=$((512 * 1024 * 1024 / size))
      ((iterations > 5000)) && iterations=5000
      ((iterations < 100)) && iterations=100
    else
      iterations=1000
    fi
    common=(-d softverbs0 -i 1 -p @PORT@ -F -s "$size" -n "$iterations")
    SERVER_CMD=("$cli" run -- "$tool" "${common[@]}")
    CLIENT_CMD=("$cli" run -- "$tool" "${common[@]}" localhost)
    echo "== $tool -s $size -n $iterations"
    if run_client_server "$tool-$size" "$limit"; then
      row=$(result_row "$PAIR_CLIENT_LOG")
    else
      row=
      print_client_server_logs | tail -n 40
    fi
    if [[ -z $row ]]; then
      failures=$((failures + 1))
      why=$(first_error "$PAIR_CLIENT_LOG" | tr '|' '/')
      [[ $PAIR_SERVER_STATUS -ne 0 ]] && why="server $(describe_status "$PAIR_SERVER_STATUS"); $why"
      line="| $tool | $size | failed: ${why:0:120} |"
      if [[ $tool == ib_write_bw ]]; then bandwidth_rows+=("$line"); else latency_rows+=("$line"); fi
      continue
    fi
    echo "   $row"
    if [[ $tool == ib_write_bw ]]; then
      bandwidth_rows+=("$(awk -v t=$tool '{ printf "| %s | %s | %s | %s | %s |", t, $1, $2, $4, $5 }' <<<"$row")")
    else
      latency_rows+=("$(awk -v t=$tool '{ printf "| %s | %s | %s | %s | %s | %s |", t, $1, $2, $5, $6, $8 }' <<<"$row")")
    fi
  done
done

# softverbs_bench as CSV; its rows become a table below.
bench_csv="$PAIR_LOG_DIR/bench.csv"
bench_note=
if [[ -x $bench ]]; then
  echo "== softverbs_bench"
  # Google Benchmark's CSV output needs every row of one run to carry the
  # same counters, so each family with its own counters runs on its own.
  if [[ -n ${BENCH_FILTER:-} ]]; then
    families=("$BENCH_FILTER")
  else
    families=('^baseline_cache_line_hop' '^baseline_memcpy' '^rc_.*_pingpong' '^rc_write_bandwidth')
  fi
  : >"$bench_csv"
  for family in "${families[@]}"; do
    timeout --kill-after=10 "${BENCH_TIMEOUT:-1200}" "$cli" run -- "$bench" \
      --benchmark_format=csv --benchmark_filter="$family" >>"$bench_csv" 2>"$PAIR_LOG_DIR/bench.err"
    status=$?
    if ((status != 0)); then
      bench_note+="softverbs_bench $family $(describe_status "$status"): $(tail -n1 "$PAIR_LOG_DIR/bench.err") "
      failures=$((failures + 1))
    fi
  done
else
  bench_note="softverbs_bench is not built (SOFTVERBS_BUILD_BENCH=OFF?)"
fi

# Turns Google Benchmark's CSV into markdown rows: name, time, throughput,
# one-way latency, or the error it reported.
bench_rows() {
  awk -F, '
    function unquote(s) { gsub(/^"|"$/, "", s); return s }
    $1 == "name" {
      delete column
      for (i = 1; i <= NF; i++) column[unquote($i)] = i
      header = 1; next
    }
    header {
      name = unquote($column["name"])
      if (column["error_occurred"] && unquote($column["error_occurred"]) == "true") {
        # The message may hold commas: it runs to the end of the line.
        message = $column["error_message"]
        for (i = column["error_message"] + 1; i <= NF; i++) message = message "," $i
        sub(/,+$/, "", message)
        printf "| %s | failed: %s | | |\n", name, unquote(message); next
      }
      time = sprintf("%.0f %s", $column["real_time"], unquote($column["time_unit"]))
      rate = ""
      if (column["bytes_per_second"] && $column["bytes_per_second"] != "")
        rate = sprintf("%.2f GB/s", $column["bytes_per_second"] / 1e9)
      one_way = ""
      if (column["one_way_us"] && $column["one_way_us"] != "")
        one_way = sprintf("%.2f us", $column["one_way_us"])
      if (column["one_way_ns"] && $column["one_way_ns"] != "")
        one_way = sprintf("%.0f ns", $column["one_way_ns"])
      printf "| %s | %s | %s | %s |\n", name, time, rate, one_way
    }' "$1"
}

{
  echo "# softverbs performance summary"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- cpu: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores"
  echo "- kernel: $(uname -r); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "## perftest on softverbs0: latency (two processes, one host)"
  echo
  echo "| tool | bytes | iterations | t_typical [us] | t_avg [us] | 99% [us] |"
  echo "|---|---:|---:|---:|---:|---:|"
  printf '%s\n' "${latency_rows[@]}"
  echo
  echo "## perftest on softverbs0: bandwidth"
  echo
  echo "| tool | bytes | iterations | BW average [MB/s] | message rate [Mpps] |"
  echo "|---|---:|---:|---:|---:|"
  printf '%s\n' "${bandwidth_rows[@]}"
  echo
  echo "## softverbs_bench: machine baselines and RC through the verbs API"
  echo
  if [[ -s $bench_csv ]]; then
    echo "| benchmark | time per iteration | throughput | one-way latency |"
    echo "|---|---:|---:|---:|"
    bench_rows "$bench_csv"
  fi
  [[ -n $bench_note ]] && echo && echo "$bench_note"
} >"$out"

echo
cat "$out"
echo
echo "summary written to $out ($failures failed measurement(s))"
((failures == 0))
