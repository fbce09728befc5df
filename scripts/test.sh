#!/usr/bin/env bash
# Runs softverbs' tests in one of two tiers.
#
#   bash scripts/test.sh         the contributor's tier, before a commit:
#                                installs what is missing, builds the normal
#                                tree (build/) and runs every test in it but
#                                the CI recipes and the ecosystem tier
#                                (labels recipes, ecosystem), several at a
#                                time (about 8 minutes on 2 cores once
#                                built)
#   bash scripts/test.sh --all   everything, as CI runs it (.ci/run): the
#                                above, the ecosystem tier (MPI, UCX, fio,
#                                rsocket, QEMU on soft devices), then the
#                                AddressSanitizer +
#                                UndefinedBehaviorSanitizer tree
#                                (build-asan/) and the ThreadSanitizer tree
#                                (build-tsan/) with the same suite each, the
#                                Debian package tested in a clean Debian 12
#                                root file system with the CI recipes of
#                                docs/ci-recipes.md, and the packet parser
#                                fuzzed for a bounded time (about 75 minutes)
#
# Each step says before it starts how long it took when it last passed on
# this machine (or, the first time, on the 2-core machine kind). Exits non-zero
# if any step fails; every step runs even after a failure.
#
#   SOFTVERBS_TEST_JOBS       tests run at once in the contributor's tier
#                             (default twice the cores: most tests wait on
#                             their processes and timers, not on a CPU)
#   SOFTVERBS_FUZZ_SECONDS    fuzzing time with --all (default 60; 0 skips it)
#   SOFTVERBS_SKIP_SANITIZE=1 --all without the ASan+UBSan tree
#   SOFTVERBS_SKIP_TSAN=1     --all without the ThreadSanitizer tree
#   SOFTVERBS_SKIP_PACKAGE=1  --all without the Debian package and the CI recipes
#   SOFTVERBS_BUILD_BESIDE_TESTS=0
#                             --all builds each sanitizer tree and the
#                             package when its step comes, instead of beside
#                             the tests before it at the lowest CPU priority
#                             (default 1)
set -uo pipefail

usage() { sed -n '2,38p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

all=0
for arg in "$@"; do
  case $arg in
    --all) all=1 ;;
    -h | --help) usage; exit 0 ;;
    *)
      echo "test: unknown argument '$arg'; 'bash scripts/test.sh' runs the contributor's tier," >&2
      echo "      'bash scripts/test.sh --all' everything (see --help)" >&2
      exit 2
      ;;
  esac
done
jobs=${SOFTVERBS_TEST_JOBS:-$((2 * $(nproc)))}
if ! [[ $jobs =~ ^[1-9][0-9]*$ ]]; then
  echo "test: SOFTVERBS_TEST_JOBS must be a positive number of tests run at once, not '$jobs'" >&2
  exit 2
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
# Tests stay on this machine: RoCE devices' UDP wire would send multicast
# and join groups on its real network. udp_hosts, which makes network
# namespaces of its own, turns it on for itself.
export SOFTVERBS_UDP=0

results=()
overall=0
started=$SECONDS

# How long each step took when it last passed here (name<TAB>seconds), to
# say before a step how long it will take; first figures from the 2-core
# machine kind.
times_file="$root/build/.test-step-seconds"
declare -A typical=(
  ["setup"]=20 ["build (build/)"]=550 ["ctest (build/)"]=720
  ["build with ASan+UBSan (build-asan/)"]=240 ["ctest with ASan+UBSan (build-asan/)"]=1280
  ["build with TSan (build-tsan/)"]=30 ["ctest with TSan (build-tsan/)"]=1290
  ["package: build, install in a clean Debian 12, run"]=30
  ["CI recipes: each job of docs/ci-recipes.md in a clean Debian 12"]=60
  ["ecosystem tier (build/)"]=160
)
declare -A measured=()  # the steps whose figure was measured here
if [[ -r $times_file ]]; then
  while IFS=$'\t' read -r name seconds; do
    [[ -n $name && $seconds =~ ^[0-9]+$ ]] && typical[$name]=$seconds measured[$name]=1
  done <"$times_file"
fi

clock() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

# step NAME COMMAND...: runs a step, records its result and duration.
step() {
  local name=$1 begin=$SECONDS status expected=${typical[$1]:-} said=""
  shift
  if [[ -n $expected ]]; then
    if [[ -n ${measured[$name]:-} ]]; then said="took $(clock "$expected") last time here"
    else said="about $(clock "$expected") on 2 cores"; fi
    said=" ($said; $(clock $((SECONDS - started))) since the start)"
  fi
  echo
  echo "=== $name$said"
  "$@"
  status=$?
  local took=$((SECONDS - begin))
  if ((status == 0)); then
    typical[$name]=$took measured[$name]=1
    results+=("ok      $name (${took}s)")
  else
    results+=("FAILED  $name (${took}s, status $status)")
    overall=1
  fi
  return $status
}

digests=()

# With --all, each sanitizer tree (and the package) builds beside the
# tests that come before its own, at the lowest CPU priority: those tests
# leave a core idle much of the time (their processes wait on each other
# and on timers), and a niced compiler gets the CPU only while they do
# not want it. Its step then waits for what is left of the build and
# prints its output.
build_beside=${SOFTVERBS_BUILD_BESIDE_TESTS:-1}
if [[ $build_beside != 0 && $build_beside != 1 ]]; then
  echo "test: SOFTVERBS_BUILD_BESIDE_TESTS must be 1 (build the sanitizer trees and the package beside the tests) or 0, not '$build_beside'" >&2
  exit 2
fi
declare -A beside_pid=() beside_log=()
# Interrupted: a build left running beside would go on alone.
trap 'for pid in "${beside_pid[@]}"; do kill -- "-$pid" 2>/dev/null; done; exit 130' INT TERM

# start_beside NAME COMMAND...: starts step NAME's command in the background.
start_beside() {
  local name=$1
  shift
  ((build_beside)) || return 0
  beside_log[$name]=$(mktemp "${TMPDIR:-/tmp}/softverbs-test-build.XXXXXX")
  # In a process group of its own (setsid), to be stopped whole.
  setsid nice -n 19 "$@" >"${beside_log[$name]}" 2>&1 &
  beside_pid[$name]=$!
  echo "(started beside the tests, at the lowest CPU priority: $name)"
}

# finish_beside NAME COMMAND...: step NAME's command: waits for it if it was
# started beside the tests, else runs it now.
finish_beside() {
  local name=$1 status
  shift
  [[ -n ${beside_pid[$name]:-} ]] || { "$@"; return; }
  wait "${beside_pid[$name]}"
  status=$?
  cat "${beside_log[$name]}"
  rm -f "${beside_log[$name]}"
  return $status
}

# run_ctest BUILD_DIR [CTEST_ARGS...]: the tree's whole suite; on failure,
# what failed and why, here and again in the summary.
run_ctest() {
  local dir=$1
  shift
  ctest --test-dir "$dir" --output-on-failure --no-tests=error --timeout 1800 -LE 'recipes|ecosystem' "$@" && return 0
  local status=$? digest
  digest=$(awk -f "$root/scripts/lib/failure-digest.awk" "$dir/Testing/Temporary/LastTest.log")
  digests+=("in $dir:" "$digest")
  echo
  echo "=== why the tests in $dir failed"
  echo "$digest"
  return $status
}

# The end of either tier: leftovers, the summary, the step times kept for
# next time, the exit status.
finish() {
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
  if [[ -d $root/build ]]; then
    for name in "${!measured[@]}"; do printf '%s\t%s\n' "$name" "${typical[$name]}"; done >"$times_file"
  fi
  exit $overall
}

if ! step "setup" bash scripts/setup.sh; then
  echo "test: cannot go on without the packages"
  exit 1
fi

asan_build="build with ASan+UBSan (build-asan/)"
asan_command=(bash scripts/build.sh --sanitize "$root/build-asan")
tsan_build="build with TSan (build-tsan/)"
tsan_command=(bash scripts/build.sh --tsan "$root/build-tsan")
sanitize=0 tsan=0 package=0
((all)) && [[ ${SOFTVERBS_SKIP_SANITIZE:-0} != 1 ]] && sanitize=1
((all)) && [[ ${SOFTVERBS_SKIP_TSAN:-0} != 1 ]] && tsan=1
((all)) && [[ ${SOFTVERBS_SKIP_PACKAGE:-0} != 1 ]] && package=1

if step "build (build/)" bash scripts/build.sh "$root/build"; then
  if ((sanitize)); then
    start_beside "$asan_build" "${asan_command[@]}"
  elif ((tsan)); then
    start_beside "$tsan_build" "${tsan_command[@]}"
  fi
  # The contributor's tier runs several tests at once; --all keeps CI's
  # one at a time, beside nothing but a build that yields the CPU to them.
  if ((all)); then
    step "ctest (build/)" run_ctest "$root/build"
  else
    step "ctest (build/)" run_ctest "$root/build" -j "$jobs"
  fi
fi

if ((!all)); then
  finish
fi

# The stacks users build on verbs (MPI, UCX, fio, rsocket, QEMU), each
# installing its packages when missing.
step "ecosystem tier (build/)" ctest --test-dir "$root/build" --output-on-failure --no-tests=error -L ecosystem

if ((sanitize)); then
  step "$asan_build" finish_beside "$asan_build" "${asan_command[@]}"
  asan_built=$?
  ((tsan)) && start_beside "$tsan_build" "${tsan_command[@]}"
  if ((asan_built == 0)); then
    step "ctest with ASan+UBSan (build-asan/)" run_ctest "$root/build-asan"
  fi
fi

# The package's build and the clean root file system (mostly a download),
# made beside the ThreadSanitizer tests (as root: the package is tested
# only then); the package step redoes whatever failed here, and says why.
prepare_package=(bash -c 'bash scripts/package.sh >/dev/null &&
  source scripts/lib/clean-root.sh && clean_root_make')

if ((tsan)); then
  step "$tsan_build" finish_beside "$tsan_build" "${tsan_command[@]}"
  tsan_built=$?
  ((package)) && (($(id -u) == 0)) && start_beside "package prepared" "${prepare_package[@]}"
  if ((tsan_built == 0)); then
    # The tests fork processes after the engine's threads started; TSan
    # allows that with die_after_fork=0.
    TSAN_OPTIONS="die_after_fork=0 ${TSAN_OPTIONS:-}" \
      step "ctest with TSan (build-tsan/)" run_ctest "$root/build-tsan"
  fi
fi

# The Debian package, installed into a clean Debian 12 root file system and
# run from there as an unprivileged user (root only: skipped otherwise).
if ((package)); then
  package_test() {
    finish_beside "package prepared" true
    bash scripts/test-package.sh
    local status=$?
    ((status == 77)) && return 0  # skipped, and it said why
    return $status
  }
  step "package: build, install in a clean Debian 12, run" package_test
  # docs/ci-recipes.md's jobs, each as written, in the same clean root.
  step "CI recipes: each job of docs/ci-recipes.md in a clean Debian 12" \
    ctest --test-dir "$root/build" --output-on-failure --no-tests=error -L recipes
fi

fuzz_seconds=${SOFTVERBS_FUZZ_SECONDS:-60}
if [[ -f scripts/fuzz-packet.sh && $fuzz_seconds != 0 ]]; then
  step "fuzz the packet parser (${fuzz_seconds}s)" bash scripts/fuzz-packet.sh "$fuzz_seconds"
fi

finish
