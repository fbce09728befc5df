#!/usr/bin/env bash
# perftest on the kernel's rxe and on softverbs in the same qemu guest
# (harness/rxe-vm), interleaved, medians of ROUNDS (default 3): the one
# comparison with a kernel provider this machine allows. Prints a markdown
# table for docs/performance.md. TESTS="ib_send_lat 8,..." picks programs.
#
#   bash bench/rxe-side-by-side.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=$(cd "${1:-build}" && pwd)
rxe_vm=harness/rxe-vm/rxe-vm
[ -s "${RXE_VM_DIR:-/var/tmp/softverbs-rxe-vm}/guest.cpio" ] || "$rxe_vm" build
cp bench/rxe-guest-perftest.sh "$build/rxe-guest-perftest.sh"
raw="$build/rxe-side-by-side.txt"
"$rxe_vm" run --share "$build" --timeout 3000 -- \
  "ROUNDS=${ROUNDS:-3} TESTS='${TESTS:-}' bash ./rxe-guest-perftest.sh" | grep -E '^(rxe0|softverbs0) ' >"$raw"
python3 - "$raw" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    device, program, size, value, unit = line.split()
    try:
        runs[(program, size, unit)].append((device, float(value)))
    except ValueError:
        pass  # a run that printed no figure
print("| perftest | rxe0 | softverbs0 | softverbs / rxe |")
print("|---|---|---|---|")
for (program, size, unit), values in runs.items():
    med = {d: statistics.median([v for dd, v in values if dd == d]) for d in ("rxe0", "softverbs0")
           if any(dd == d for dd, _ in values)}
    if len(med) < 2:
        continue
    ratio = med["softverbs0"] / med["rxe0"]
    print(f"| `{program} -s {size}` | {med['rxe0']:.1f} {unit} | {med['softverbs0']:.1f} {unit} | {ratio:.2f}× |")
PY
