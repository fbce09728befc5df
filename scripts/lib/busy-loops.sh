# shellcheck shell=bash
# Busy loops beside a test, so that it runs on a host whose cores are taken
# (as a shared CI runner's are). Source this file.
#
#   start_busy_loops 2    # two processes spinning, each bounded to 300 s
#   ...
#   stop_busy_loops
#
# Call stop_busy_loops from the test's EXIT trap too.

BUSY_LOOP_PIDS=()

start_busy_loops() {
  local count=${1:-2}
  for _ in $(seq 1 "$count"); do
    timeout 300 sh -c 'while :; do :; done' &
    BUSY_LOOP_PIDS+=($!)
  done
}

stop_busy_loops() {
  ((${#BUSY_LOOP_PIDS[@]})) && kill "${BUSY_LOOP_PIDS[@]}" 2>/dev/null
  BUSY_LOOP_PIDS=()
  return 0
}
