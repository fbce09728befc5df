#!/usr/bin/env bash
# Runs every test softverbs has, as CI does: installs what is missing, builds
# the normal tree (build/) and runs its ctest suite, builds the
# AddressSanitizer + UndefinedBehaviorSanitizer tree (build-asan/) and the
# ThreadSanitizer tree (build-tsan/) and runs the same suite in each, then
# builds the Debian package and tests it in a clean Debian 12 root file
# system, and fuzzes the packet parser for a bounded time.
# Exits non-zero if any step fails; every step runs even after a failure.
#
# Usage: scripts/test.sh
#   SOFTVERBS_FUZZ_SECONDS  fuzzing time (default 60; 0 skips fuzzing)
#   SOFTVERBS_SKIP_SANITIZE=1  skip the ASan+UBSan build and its tests
#   SOFTVERBS_SKIP_TSAN=1      skip the ThreadSanitizer build and its tests
#   SOFTVERBS_SKIP_PACKAGE=1   skip building and testing the Debian package
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
# Tests stay on this machine: RoCE devices' UDP wire would send multicast
# and join groups on its real network. udp_hosts, which makes network
# namespaces of its own, turns it on for itself.
export SOFTVERBS_UDP=0

results=()
overall=0
started=$SECONDS

# step NAME COMMAND...: runs a step, records its result and duration.
step() {
  local name=$1 begin=$SECONDS status
  shift
  echo
  echo "=== $name"
  "$@"
  status=$?
  local took=$((SECONDS - begin))
  if ((status == 0)); then
    results+=("ok      $name (${took}s)")
  else
    results+=("FAILED  $name (${took}s, status $status)")
    overall=1
  fi
  return $status
}

digests=()

# run_ctest BUILD_DIR: the tree's whole suite; on failure, what failed and
# why, here and again in the summary.
run_ctest() {
  ctest --test-dir "$1" --output-on-failure --no-tests=error --timeout 1800 && return 0
  local status=$? digest
  digest=$(awk -f "$root/scripts/lib/failure-digest.awk" "$1/Testing/Temporary/LastTest.log")
  digests+=("in $1:" "$digest")
  echo
  echo "=== why the tests in $1 failed"
  echo "$digest"
  return $status
}

if ! step "setup" bash scripts/setup.sh; then
  echo "test: cannot go on without the packages"
  exit 1
fi

if step "build (build/)" bash scripts/build.sh "$root/build"; then
  step "ctest (build/)" run_ctest "$root/build"
fi

if [[ ${SOFTVERBS_SKIP_SANITIZE:-0} != 1 ]]; then
  if step "build with ASan+UBSan (build-asan/)" bash scripts/build.sh --sanitize "$root/build-asan"; then
    step "ctest with ASan+UBSan (build-asan/)" run_ctest "$root/build-asan"
  fi
fi

if [[ ${SOFTVERBS_SKIP_TSAN:-0} != 1 ]]; then
  if step "build with TSan (build-tsan/)" bash scripts/build.sh --tsan "$root/build-tsan"; then
    # The tests fork processes after the engine's threads started; TSan
    # allows that with die_after_fork=0.
    TSAN_OPTIONS="die_after_fork=0 ${TSAN_OPTIONS:-}" \
      step "ctest with TSan (build-tsan/)" run_ctest "$root/build-tsan"
  fi
fi

# The Debian package, installed into a clean Debian 12 root file system and
# run from there as an unprivileged user (root only: skipped otherwise).
if [[ ${SOFTVERBS_SKIP_PACKAGE:-0} != 1 ]]; then
  package_test() {
    bash scripts/test-package.sh
    local status=$?
    ((status == 77)) && return 0  # skipped, and it said why
    return $status
  }
  step "package: build, install in a clean Debian 12, run" package_test
fi

fuzz_seconds=${SOFTVERBS_FUZZ_SECONDS:-60}
if [[ -f scripts/fuzz-packet.sh && $fuzz_seconds != 0 ]]; then
  step "fuzz the packet parser (${fuzz_seconds}s)" bash scripts/fuzz-packet.sh "$fuzz_seconds"
fi

# Every softverbs process removes its shared-memory segments when the last
# one goes; what the tests' prefixes left behind is worth a look.
leftovers=$(find /dev/shm -maxdepth 1 \( -name "svctest-$(id -u)-*" -o -name "svutils-$(id -u)-*" \) 2>/dev/null)
if [[ -n $leftovers ]]; then
  echo
  echo "note: segments left in /dev/shm by the test runs (or by another run still going):"
  echo "$leftovers" | sed 's/^/  /'
fi

echo
echo "=== summary ($((SECONDS - started))s)"
printf '%s\n' "${results[@]}"
if ((${#digests[@]})); then
  echo
  echo "=== why tests failed"
  printf '%s\n' "${digests[@]}"
fi
exit $overall
