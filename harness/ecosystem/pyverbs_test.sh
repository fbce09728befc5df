#!/usr/bin/env bash
# pyverbs, rdma-core's Python bindings (Debian's python3-pyverbs), on soft
# devices: pyverbs_rdma_cm.py finds its address where rdma-core's own test
# suite does (the device's device/net/ in sysfs), connects two processes
# through pyverbs' librdmacm wrappers and moves SENDs, an RDMA WRITE and an
# RDMA READ, checking every byte. It runs in a network namespace this test
# makes, with a veth pair whose up end holds the only address besides lo.
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

namespace=softverbs-pyverbs-$$
ip netns add "$namespace" || skip "ip netns add failed: no network namespaces here"
trap 'ip netns del "$namespace" 2>/dev/null; cleanup' EXIT
ip -n "$namespace" link set lo up
ip -n "$namespace" link add sv-py0 type veth peer name sv-py1
ip -n "$namespace" addr add 10.198.0.1/24 dev sv-py0
ip -n "$namespace" link set sv-py0 up
in_namespace=(ip netns exec "$namespace")

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
