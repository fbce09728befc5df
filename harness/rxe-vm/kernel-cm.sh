#!/usr/bin/env bash
# librdmacm with a kernel RDMA device beside the soft ones: in the rxe-vm
# guest (rxe0 on 192.0.2.1), every program under `softverbs run`, so that
# the soft devices' rdma_cm file serves each process and forwards to the
# kernel's CM the ids of rxe0's address.
#
#   bash harness/rxe-vm/kernel-cm.sh [BUILD_DIR]     (the guest: sudo rxe-vm build)
#
# Checks, each must pass:
#   - kernel_beside_soft: one process, a loopback connection on softverbs0
#     and one to 192.0.2.1 on rxe0, through one listener;
#   - the librdmacm conformance suite on 192.0.2.1: every id forwarded,
#     the kernel's CM and rxe0 answer;
#   - the same suite on 127.0.0.1: every id soft, with the kernel's CM there;
#   - rping between two processes on 192.0.2.1 (rxe0's packet counter moves)
#     and on 127.0.0.1 (it does not).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
for program in harness/cli/softverbs harness/rxe-vm/kernel_beside_soft \
               conformance/cm/cm_conformance_tests; do
  [[ -x $build/$program ]] || { echo "kernel-cm: $build/$program is missing: build first" >&2; exit 2; }
done

read -r -d '' guest <<'EOF'
sv=./harness/cli/softverbs
failures=0
check() {  # LABEL COMMAND...
  local label=$1; shift
  if "$@" > /tmp/check.log 2>&1; then echo "PASS $label"
  else echo "FAIL $label"; tail -20 /tmp/check.log; failures=$((failures + 1)); fi
}
sent() { cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts; }
rping_pair() {  # ADDRESS
  timeout 30 $sv run -- rping -s -a "$1" -C 3 -V > /tmp/rping-server.log 2>&1 &
  local server=$!
  sleep 2
  timeout 30 $sv run -- rping -c -a "$1" -C 3 -V && wait $server
}
on_rxe() {  # ADDRESS: rping there moves rxe0's counter
  local before=$(sent)
  rping_pair "$1" && (( $(sent) > before ))
}
on_soft() {
  local before=$(sent)
  rping_pair "$1" && (( $(sent) == before ))
}
check "kernel_beside_soft" $sv run -- ./harness/rxe-vm/kernel_beside_soft
check "cm suite on rxe0's address, forwarded" \
  $sv run -- ./conformance/cm/cm_conformance_tests --cm-address=192.0.2.1
check "cm suite on loopback, soft, beside the kernel's CM" \
  $sv run -- ./conformance/cm/cm_conformance_tests --cm-address=127.0.0.1
check "rping on 192.0.2.1 runs on rxe0" on_rxe 192.0.2.1
check "rping on 127.0.0.1 runs on softverbs0" on_soft 127.0.0.1
exit $((failures > 0))
EOF

exec "$here/rxe-vm" run --share "$build" --timeout 900 -- bash -c "$guest"
