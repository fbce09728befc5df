#!/usr/bin/env bash
# pyverbs, rdma-core's Python bindings (Debian's python3-pyverbs), on soft
# devices: pyverbs_rdma_cm.py finds its address where rdma-core's own test
# suite does (the device's device/net/ in sysfs), connects two processes
# through pyverbs' librdmacm wrappers and moves SENDs, an RDMA WRITE and an
# RDMA READ, checking every byte. It runs in a host of `softverbs topo`, a
# network namespace whose one interface besides lo holds an address.
# Passes when the program ends with status 0 and its frames went through
# the soft devices. Root only (the namespace).
#
# Usage: pyverbs_test.sh PATH/TO/softverbs LINK_LAYER
set -uo pipefail
link_layer=${2:?say the link layer: ib or eth}
test_name=pyverbs_${link_layer}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/ecosystem_lib.sh"
export SOFTVERBS_LINK_LAYER=$link_layer
(($(id -u) == 0)) || skip "needs root for the network namespace it runs in"
need_packages python3-pyverbs iproute2

# One host of `softverbs topo`: a network namespace whose sv0 is up with an
# address. `topo exec` gives its programs a shared-memory prefix of their
# own (the lib's, with the host's name), the same for the run and for
# `softverbs stats`.
topology=svpy$$
"$cli" topo --name "$topology" up 1 >"$work/topo.log" 2>&1 ||
  skip "softverbs topo up failed: $(tail -1 "$work/topo.log")"
in_namespace=("$cli" topo --name "$topology" exec 1 --)
trap '"${in_namespace[@]}" "$cli" reset --force >/dev/null 2>&1
      "$cli" topo --name "$topology" down >/dev/null 2>&1; cleanup' EXIT

watch_traffic python3
port=$(free_tcp_port)
# Debian's interpreter, where python3-pyverbs is installed, whatever else
# is first on PATH.
bounded 120 "${in_namespace[@]}" "$cli" run -- /usr/bin/python3 \
  "$here/pyverbs_rdma_cm.py" softverbs0 "$port" 10000 >"$work/run.log" 2>&1
status=$?
check
((status == 0)) || fail "pyverbs_rdma_cm.py exited with $status"
cat "$work/run.log"
check_traffic
finish
