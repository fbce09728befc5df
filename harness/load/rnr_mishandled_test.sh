#!/usr/bin/env bash
# A failure seen once under a fault plan is had again from the seed its run
# printed, every time. rnr_mishandled (a program with a bug seeded on
# purpose: it takes IBV_WC_RNR_RETRY_EXC_ERR for the end of the stream)
# runs under "rnr:p=0.15" with eight seeds; each failing run is replayed
# from the seed `softverbs run` printed, three times (once beside two busy
# loops), and must fail at the same message; each passing seed must pass
# again. Without a plan it always passes.
#
# Usage: rnr_mishandled_test.sh PATH/TO/softverbs PATH/TO/rnr_mishandled
set -uo pipefail
export SOFTVERBS_UDP=0
cli=${1:?usage: rnr_mishandled_test.sh SOFTVERBS RNR_MISHANDLED}
program=${2:?usage: rnr_mishandled_test.sh SOFTVERBS RNR_MISHANDLED}
export SOFTVERBS_SHM_PREFIX=${SOFTVERBS_SHM_PREFIX:-svrnrbug}
plan='rnr:p=0.15'
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../scripts/lib/busy-loops.sh
source "$here/../../scripts/lib/busy-loops.sh"
trap 'stop_busy_loops; rm -f /dev/shm/$SOFTVERBS_SHM_PREFIX-*' EXIT
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

# run_once [softverbs run options]: sets $out and $status.
run_once() {
  out=$(timeout 120 "$cli" run "$@" -- "$program" 2>&1)
  status=$?
}
# Where the run stopped: "server busy at message K", or "all".
outcome() {
  if grep -q 'all .* messages arrived' <<<"$out"; then echo all; return; fi
  grep -o 'server busy at message [0-9]*' <<<"$out" || echo "unexplained: $out"
}

run_once
((status == 0)) || fail "without a plan: status $status: $out"

failed_seeds=0 passed_seeds=0
for seed in 1 2 3 4 5 6 7 8; do
  SOFTVERBS_FAULTS=$plan run_once --seed "$seed"
  first=$(outcome)
  printed=$(grep -o 'fault plan seed [0-9]*' <<<"$out" | grep -o '[0-9]*$')
  if [[ $printed != "$seed" ]]; then
    fail "seed $seed: softverbs run printed seed '$printed'"
    continue
  fi
  if ((status == 1)); then
    failed_seeds=$((failed_seeds + 1))
    grep -q 'FAIL: the server got' <<<"$out" || fail "seed $seed: failed without saying how: $out"
  elif ((status == 0)); then
    passed_seeds=$((passed_seeds + 1))
  else
    fail "seed $seed: status $status: $out"
    continue
  fi
  # The replay, from the printed seed, with the host busy or not.
  for round in 1 2 3; do
    ((round == 2)) && start_busy_loops 2
    SOFTVERBS_FAULTS=$plan run_once --seed "$printed"
    stop_busy_loops
    again=$(outcome)
    [[ $again == "$first" ]] || fail "seed $printed, replay $round: '$again', first run: '$first'"
  done
  echo "seed $seed: $first (replayed 3 times)"
done
((failed_seeds > 0)) || fail "no seed made the bug show: the rnr rule did nothing?"
((passed_seeds > 0)) || fail "every seed failed: the bug shows without faults?"

if ((failures)); then
  echo "$failures failures"
  exit 1
fi
echo "rnr_mishandled: $failed_seeds failing seeds and $passed_seeds passing ones, each replayed"
