#!/bin/bash
# Inside the rxe-vm guest (bench/rxe-side-by-side.sh starts it): the same
# perftest programs on rxe0 and on softverbs0, interleaved round by round,
# one line per run: "DEVICE PROGRAM SIZE VALUE UNIT".
# Run from the build directory, shared at /host.
set -u
rounds=${ROUNDS:-3}
softverbs=./harness/cli/softverbs
tests=("ib_send_lat 8" "ib_write_lat 8" "ib_read_lat 8" "ib_send_bw 65536" "ib_write_bw 65536" "ib_read_bw 65536")
# e.g. TESTS="ib_send_lat 8,ib_write_bw 65536,ib_send_lat 8 -e" (options after the size)
[ -n "${TESTS:-}" ] && IFS=, read -r -a tests <<<"$TESTS"

# One perftest run, server and client, on DEVICE; prints the figure.
measure() {
  local device=$1 program=$2 size=$3 port=$4 options=$5
  local common=(-d "$device" -s "$size" -p "$port" -n 2000 $options)
  local wrap=()
  if [ "$device" = rxe0 ]; then common+=(-x 1); else wrap=("$softverbs" run --); fi
  timeout 120 "${wrap[@]}" "$program" "${common[@]}" >/tmp/server.out 2>&1 &
  local server=$!
  sleep 1
  timeout 120 "${wrap[@]}" "$program" "${common[@]}" 127.0.0.1 >/tmp/client.out 2>&1
  wait $server
  # Latency: t_typical (the median), column 5; bandwidth: BW average, column 4.
  local row
  row=$(grep -E "^ +$size +[0-9]+" /tmp/client.out | tail -1)
  # The options join the program's name: one word on the line.
  local name=$program${options:+_${options// /}}
  case $program in
    *_lat) echo "$device $name $size $(echo "$row" | awk '{print $5}') usec" ;;
    *_bw) echo "$device $name $size $(echo "$row" | awk '{print $4}') MB/s" ;;
  esac
}

port=18600
for round in $(seq "$rounds"); do
  for t in "${tests[@]}"; do
    read -r program size options <<<"$t"
    for device in rxe0 softverbs0; do
      port=$((port + 1))
      measure "$device" "$program" "$size" "$port" "$options"
    done
  done
done
