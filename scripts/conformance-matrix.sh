#!/usr/bin/env bash
# Runs the conformance suites on softverbs (here) and on the kernel's rxe
# (in the rxe-vm guest), and writes docs/conformance.md from their output.
#
#   bash scripts/conformance-matrix.sh [--report-only | --keep-rxe] [BUILD_DIR]   (default: build)
#
# --report-only rewrites docs/conformance.md from the logs of the last run
# (after conformance/deviations.tsv changed, say); --keep-rxe runs softverbs
# again and keeps the rxe logs of the last run.
#
# As root the suite also runs between two hosts (two network namespaces,
# RoCE over the UDP wire: harness/cli/conformance_hosts_test.sh), as the
# column "softverbs, two hosts".
#
# Tests added since the last rxe run can be run on rxe alone into another
# part, then kept with --keep-rxe (the rows are the suite as softverbs ran it):
#   harness/rxe-vm/rxe-vm run --share build --timeout 600 -- \
#     ./conformance/conformance_tests --device=rxe0 --gid-index=1 --gtest_filter='NEW.*' \
#     > build/conformance-matrix/rxe-verbs-N.log 2>&1
#
# A run on another device joins as a column of its own:
#   CONFORMANCE_HCA_LOGS="mlx5=verbs.log,cm.log" bash scripts/conformance-matrix.sh --report-only
# where the logs are the output of
#   conformance_tests --device=mlx5_0 --gid-index=N  and
#   cm_conformance_tests --device=mlx5_0 --gid-index=N --cm-address=ADDR
# on that machine.
#
# Needs a built tree and the rxe-vm guest (made on first use; root). A test
# that takes the guest's kernel down is recorded as such and the run goes
# on past it, up to five times. Logs stay in BUILD_DIR/conformance-matrix.
# Takes 20-40 minutes: the guest is emulated (qemu TCG).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
report_only=0 keep_rxe=0
case "${1:-}" in
  --report-only) report_only=1; shift ;;
  --keep-rxe) keep_rxe=1; shift ;;
esac
build=$(cd "${1:-build}" && pwd)
out="$build/conformance-matrix"
rxe_vm=harness/rxe-vm/rxe-vm

finished_tests() { sed -nE 's/^\[ +(OK|FAILED|SKIPPED) +\] ([^ ]+\.[^ ]+) \([0-9]+ ms\)$/\2/p' "$@"; }
unfinished_test() {  # the test a log started last and never ended
  local last
  last=$(sed -nE 's/^\[ RUN +\] ([^ ]+)$/\1/p' "$1" | tail -1)
  [ -n "$last" ] && ! finished_tests "$1" | grep -qxF "$last" && echo "$last"
}

# rxe_suite NAME BINARY ARGS...: the logs are $out/rxe-NAME-PART.log.
rxe_suite() {
  local name=$1 binary=$2; shift 2
  local part=1 skip=() crashed=()
  while [ $part -le 5 ]; do
    local filter="*"
    [ ${#skip[@]} -gt 0 ] && filter="-$(IFS=:; echo "${skip[*]}")"
    echo "rxe: $name suite, part $part" >&2
    "$rxe_vm" run --share "$build" --timeout 3000 -- "./$binary" "$@" "--gtest_filter=$filter" \
      >"$out/rxe-$name-$part.log" 2>&1 || true
    local stuck
    stuck=$(unfinished_test "$out/rxe-$name-$part.log" || true)
    [ -z "$stuck" ] && break
    echo "rxe: $stuck did not finish; going on past it" >&2
    crashed+=("$stuck")
    mapfile -t done_tests < <(finished_tests "$out"/rxe-"$name"-*.log)
    skip=("${done_tests[@]}" "${crashed[@]}")
    part=$((part + 1))
  done
}
if [ $report_only = 0 ]; then
  [ -x "$build/conformance/conformance_tests" ] ||
    { echo "conformance-matrix: no conformance_tests in $build; build first (bash scripts/build.sh)" >&2; exit 2; }
  mkdir -p "$out"
  rm -f "$out"/softverbs-*.log "$out"/hosts-*.log
  [ $keep_rxe = 1 ] || rm -f "$out"/rxe-*.log
  echo "softverbs: both suites" >&2
  "$build/harness/cli/softverbs" run -- "$build/conformance/conformance_tests" >"$out/softverbs-verbs.log" 2>&1 || true
  "$build/harness/cli/softverbs" run -- "$build/conformance/cm/cm_conformance_tests" >"$out/softverbs-cm.log" 2>&1 || true
  # What skips on the default soft device runs in the configuration it
  # needs, as ctest's conformance_* variants do.
  SOFTVERBS_LINK_LAYER=eth "$build/harness/cli/softverbs" run -- "$build/conformance/conformance_tests" \
    --gtest_filter='RocePort.*:PathMigration.Roce*:UdTransport.OnRoce*' >"$out/softverbs-roce.log" 2>&1 || true
  SOFTVERBS_PORTS=2 "$build/harness/cli/softverbs" run -- "$build/conformance/conformance_tests" \
    --gtest_filter='PathMigration.*' >"$out/softverbs-two-ports.log" 2>&1 || true
  SOFTVERBS_MAX_PD=64 SOFTVERBS_MAX_CQ=48 SOFTVERBS_MAX_QP=40 SOFTVERBS_MAX_MR=100 \
    SOFTVERBS_MAX_SRQ=24 SOFTVERBS_MAX_AH=80 "$build/harness/cli/softverbs" run -- \
    "$build/conformance/conformance_tests" --gtest_filter='ObjectLimits.*' \
    >"$out/softverbs-limits.log" 2>&1 || true
  if [ "$(id -u)" = 0 ]; then
    echo "softverbs: two hosts" >&2
    bash harness/cli/conformance_hosts_test.sh "$build/harness/cli/softverbs" \
      "$build/conformance/conformance_tests" >"$out/hosts-verbs.log" 2>&1 || true
  fi
  if [ $keep_rxe = 0 ]; then
    [ -s "${RXE_VM_DIR:-/var/tmp/softverbs-rxe-vm}/guest.cpio" ] || "$rxe_vm" build
    rxe_suite verbs conformance/conformance_tests --device=rxe0 --gid-index=1
    rxe_suite cm conformance/cm/cm_conformance_tests --device=rxe0 --gid-index=1 --cm-address=192.0.2.1
  fi
fi
[ -s "$out/softverbs-verbs.log" ] || { echo "conformance-matrix: no logs in $out; run without --report-only" >&2; exit 2; }

# A part that stopped inside a test: the guest's kernel went down under it.
crashed=()
for log in "$out"/rxe-*.log; do
  stuck=$(unfinished_test "$log" || true)
  [ -n "$stuck" ] && crashed+=("$stuck")
done

logs() { local IFS=,; echo "$*"; }
columns=(--column "softverbs=$(logs "$out"/softverbs-*.log)")
if compgen -G "$out/hosts-*.log" >/dev/null; then
  columns+=(--column "softverbs, two hosts=$(logs "$out"/hosts-*.log)")
  hosts_source="
softverbs, two hosts: the suite on a RoCE device of one network namespace, each two-process test's peer on another (\`harness/cli/conformance_hosts_test.sh\`, the UDP wire between them)."
fi
columns+=(--column "rxe=$(logs "$out"/rxe-*.log)")
[ -n "${CONFORMANCE_HCA_LOGS:-}" ] && columns+=(--column "$CONFORMANCE_HCA_LOGS")
kernel=$(cat "${RXE_VM_DIR:-/var/tmp/softverbs-rxe-vm}/kernel-version" 2>/dev/null || echo "?")
# The first part's time, and the last one's when a part was run later
# (tests added since, run by hand into another rxe-verbs-N.log).
rxe_when=$(date -u -r "$(ls -tr "$out"/rxe-*.log | head -1)" '+%Y-%m-%d %H:%M UTC' 2>/dev/null || echo "?")
rxe_last=$(date -u -r "$(ls -t "$out"/rxe-*.log | head -1)" '+%Y-%m-%d %H:%M UTC' 2>/dev/null || echo "?")
[ "${rxe_last%% *}" != "${rxe_when%% *}" ] && rxe_when="$rxe_when (a part run $rxe_last)"
python3 scripts/conformance_matrix.py \
  "${columns[@]}" \
  --crashed "rxe=$(logs "${crashed[@]}")" \
  --notes conformance/deviations.tsv \
  --source "softverbs: $(git -C "$build/.." rev-parse --short HEAD 2>/dev/null || git rev-parse --short HEAD) under \`softverbs run\` on the host.${hosts_source:-}
rxe: Debian's kernel $kernel with rdma_rxe and rdma-core 44, in the \`harness/rxe-vm\` guest (qemu TCG, 2 vCPUs), \`--device=rxe0 --gid-index=1\`, run $rxe_when.
Generated $(date -u +%Y-%m-%d)." >docs/conformance.md
echo "conformance-matrix: wrote docs/conformance.md (logs in $out)" >&2
