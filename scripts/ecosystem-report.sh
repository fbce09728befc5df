#!/usr/bin/env bash
# Runs the ecosystem tier (ctest label `ecosystem`) on softverbs and, where
# the rxe-vm guest has the stack, the same programs on the kernel's rxe, and
# writes the table of docs/ecosystem.md between its markers from the runs'
# output.
#
#   bash scripts/ecosystem-report.sh [--report-only | --keep-rxe] [BUILD_DIR]   (default: build)
#
# --report-only rewrites the table from the logs of the last run; --keep-rxe
# runs softverbs again and keeps the rxe log of the last run. Logs stay in
# BUILD_DIR/ecosystem-report. Needs a built tree; the rxe column needs the
# rxe-vm guest (made on first use; root): without it, or with --keep-rxe and
# no log of a last run, the rxe column the doc already has is kept.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=run
case ${1:-} in
  -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --report-only) mode=report; shift ;;
  --keep-rxe) mode=keep-rxe; shift ;;
  -*) echo "ecosystem-report: unknown option '$1' (see --help)" >&2; exit 2 ;;
esac
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd) ||
  { echo "ecosystem-report: no build tree at ${1:-$root/build}; run scripts/build.sh" >&2; exit 2; }
logs=$build/ecosystem-report
mkdir -p "$logs"
doc=$root/docs/ecosystem.md

# The rxe column of the table already in the doc, written as the guest's
# log would have it, and the date of that run: for a machine that has no
# guest (it is made as root, on first use) or no log of its last run.
rxe_log_from_doc() {
  awk -F' \\| ' '/<!-- ecosystem report begin/, /<!-- ecosystem report end/ {
      if ($0 !~ /^\| `ecosystem_/) next
      name = $1; sub(/^\| `ecosystem_/, "", name); sub(/`$/, "", name)
      text = $3; sub(/ \|$/, "", text)
      if (text !~ /^(not in the guest|— )/) print "case " name ": " text }' "$doc" >"$logs/rxe.log"
  sed -n 's/^rxe: .*, run \(.*\)\.$/\1/p' "$doc" | head -1 >"$logs/rxe.date"
  echo "ecosystem-report: the rxe column is the one docs/ecosystem.md had (run $(cat "$logs/rxe.date"))" >&2
}

if [[ $mode != report ]]; then
  (cd "$build" && ctest -L ecosystem --output-on-failure >"$logs/ctest.out" 2>&1)
  cp "$build/Testing/Temporary/LastTest.log" "$logs/softverbs.log"
  git -C "$root" rev-parse --short HEAD >"$logs/softverbs.commit" 2>/dev/null
fi
if [[ $mode == run ]]; then
  # The guest runs what it has: Open MPI with UCX over rxe0 and rsocket.
  # Its TCG vCPUs are tens of times slower than the host's: its figures
  # say what works, not how fast a kernel provider is.
  timeout -k 10 900 "$root/harness/rxe-vm/rxe-vm" run --share "$root/harness/ecosystem" --timeout 840 \
    -- bash ./rxe_guest.sh >"$logs/rxe.log" 2>&1
  if grep -q '^rxe-vm: no guest' "$logs/rxe.log"; then
    echo "ecosystem-report: no rxe-vm guest here (make it with: sudo harness/rxe-vm/rxe-vm build)" >&2
    rxe_log_from_doc
  else
    date -u '+%Y-%m-%d %H:%M UTC' >"$logs/rxe.date"
  fi
elif [[ $mode == keep-rxe && ! -s $logs/rxe.log ]]; then
  rxe_log_from_doc
fi

# test name -> outcome and its summary lines, from ctest's log.
declare -A outcome=() summary=()
while IFS=$'\t' read -r name result text; do
  outcome[$name]=$result
  summary[$name]=$text
done < <(awk '
  /^[0-9]+\/[0-9]+ Testing: / { name = $3; text = ""; next }
  name != "" && $0 ~ ("^" substr(name, 11) ": ") && !/checks, [0-9]+ failed$/ {
    line = $0; sub(/^[^:]*: /, "", line); text = text (text == "" ? "" : "; ") line; next }
  name != "" && /^skipped: / { skipped = 1; text = substr($0, 10); next }
  name != "" && /^Test (Passed|Failed|Skipped|Not Run)/ {
    result = skipped || $2 !~ /^(Passed|Failed)/ ? "skip" : $2 == "Passed." ? "pass" : "FAIL"
    print name "\t" result "\t" text; name = ""; skipped = 0 }
' "$logs/softverbs.log" 2>/dev/null)

# rxe: each guest case prints "case NAME: pass|FAIL|skip: text".
declare -A rxe=()
while IFS=$'\t' read -r name text; do rxe[$name]=$text; done < <(
  sed -n 's/^case \([a-z0-9_]*\): \(.*\)$/ecosystem_\1\t\2/p' "$logs/rxe.log" 2>/dev/null)

table() {
  echo "| test | softverbs | rxe |"
  echo "|---|---|---|"
  local name
  for name in $(printf '%s\n' "${!outcome[@]}" | sort); do
    local other="not in the guest"
    [[ $name == *_ib ]] && other="— (rxe is RoCE only)"
    echo "| \`$name\` | ${outcome[$name]}: ${summary[$name]:-} | ${rxe[$name]:-$other} |"
  done
}
[[ ${#outcome[@]} -gt 0 ]] || { echo "ecosystem-report: no results in $logs/softverbs.log" >&2; exit 1; }

{
  echo "<!-- ecosystem report begin: written by scripts/ecosystem-report.sh; edit outside the markers -->"
  echo
  echo "softverbs: $(cat "$logs/softverbs.commit" 2>/dev/null || echo '?') under \`softverbs run\`," \
    "$(nproc) cores, $(. /etc/os-release && echo "$PRETTY_NAME"), generated $(date -u +%Y-%m-%d)."
  echo "rxe: the \`harness/rxe-vm\` guest (Debian's kernel with rdma_rxe, qemu TCG, 2 vCPUs)," \
    "run $(cat "$logs/rxe.date" 2>/dev/null || echo 'never')."
  echo
  table
  echo
  echo "<!-- ecosystem report end -->"
} >"$logs/table.md"

awk -v table="$logs/table.md" '
  /<!-- ecosystem report begin/ { while ((getline line < table) > 0) print line; skipping = 1; next }
  /<!-- ecosystem report end -->/ { skipping = 0; next }
  !skipping
' "$doc" >"$logs/ecosystem.md" && mv "$logs/ecosystem.md" "$doc"
echo "ecosystem-report: $doc (${#outcome[@]} tests)"
