#!/usr/bin/env bash
# softverbs and the kernel's rxe on one wire: rxe0 in a qemu guest
# (harness/rxe-vm) on a tap device, softverbs0 (RoCE) in a network namespace
# of this machine on the same link, exchanging traffic with unmodified
# ibverbs-utils and perftest in both directions. Needs root (the namespace,
# the tap) and a guest built with network support (`sudo rxe-vm build`).
#
#   sudo bash harness/rxe-vm/interop.sh [BUILD_DIR]
#
# The guest is 198.18.0.10, softverbs 198.18.0.1 (RFC 2544's range); both
# use the RoCE v2 GID of their IPv4 address (index 3 on softverbs0, the
# guest finds rxe0's: RXE_GID_INDEX).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
cli=$build/harness/cli/softverbs
rxe_vm=$here/rxe-vm
ns=svrxe$$
link_ns=${ns}link  # the bridge and the tap
tap=svtap0
if (($(id -u) != 0)); then
  echo "interop: needs root (a network namespace and a tap device)" >&2
  exit 1
fi

export SOFTVERBS_LINK_LAYER=eth SOFTVERBS_SHM_PREFIX=svinterop
logs=$(mktemp -d)
cleanup() {
  ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null
  ip netns pids "$link_ns" 2>/dev/null | xargs -r kill 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  ip netns del "$link_ns" 2>/dev/null
  rm -rf "$logs"
}
trap cleanup EXIT
# softverbs' namespace reaches the tap through a veth pair and a bridge in
# a namespace of their own, as on a host whose NIC offloads checksums:
# its UDP GSO sends (which a bare tap refuses) are cut into packets on the
# way to the guest, each with its own IPv4 identification, and rxe checks
# every ICRC against it.
ip netns add "$ns" &&
  ip netns add "$link_ns" &&
  ip -n "$ns" link set lo up &&
  ip -n "$link_ns" tuntap add dev "$tap" mode tap &&
  ip -n "$link_ns" link add br0 type bridge &&
  ip -n "$link_ns" link add sv0peer type veth peer name sv0 netns "$ns" &&
  ip -n "$link_ns" link set "$tap" master br0 &&
  ip -n "$link_ns" link set sv0peer master br0 &&
  ip -n "$link_ns" link set br0 up &&
  ip -n "$link_ns" link set "$tap" up &&
  ip -n "$link_ns" link set sv0peer up &&
  ip -n "$ns" addr add 198.18.0.1/24 dev sv0 &&
  ip -n "$ns" link set sv0 up || { echo "interop: could not make the namespaces and tap" >&2; exit 1; }

failures=0
# case LABEL SERVER_SIDE GUEST_COMMAND HOST_COMMAND...: one side serves,
# the other connects; both must succeed.
interop_case() {
  local label=$1 server=$2 guest_command=$3
  shift 3
  if [[ $server == softverbs ]]; then
    ip netns exec "$ns" timeout 300 "$cli" run -- "$@" >"$logs/host.log" 2>&1 &
  else
    # The guest serves once it has booted: the client here tries again
    # until it connects, for up to 3 minutes.
    (
      for _ in $(seq 90); do
        sleep 2
        ip netns exec "$ns" timeout 120 "$cli" run -- "$@" 198.18.0.10 >"$logs/host.log" 2>&1 && exit 0
        grep -q "Couldn't connect" "$logs/host.log" || exit 1
      done
      exit 1
    ) &
  fi
  local host_pid=$!
  ip netns exec "$link_ns" "$rxe_vm" run --share "$build" --net "$tap" 198.18.0.10/24 --timeout 400 \
    -- "timeout 300 bash -c '$guest_command'" >"$logs/guest.log" 2>&1
  local guest_status=$?
  wait "$host_pid"
  local host_status=$?
  if ((guest_status == 0 && host_status == 0)); then
    echo "ok: $label"
    grep -h -E "iters in|MB/sec|usec" "$logs/guest.log" "$logs/host.log" | sed 's/^/  /' | head -4
  else
    echo "FAILED: $label (guest $guest_status, softverbs $host_status)"
    tail -8 "$logs/guest.log" | sed 's/^/  guest| /'
    tail -8 "$logs/host.log" | sed 's/^/  softverbs| /'
    failures=$((failures + 1))
  fi
}

interop_case "ibv_rc_pingpong: rxe0 connects to softverbs0" softverbs \
  "sleep 2; ibv_rc_pingpong -d rxe0 -g \$RXE_GID_INDEX -n 200 -c 198.18.0.1" ibv_rc_pingpong -g 3 -n 200 -c
interop_case "ibv_rc_pingpong: softverbs0 connects to rxe0" rxe \
  "ibv_rc_pingpong -d rxe0 -g \$RXE_GID_INDEX -n 200 -c" ibv_rc_pingpong -g 3 -n 200 -c
interop_case "ib_send_bw: rxe0 sends to softverbs0" softverbs \
  "sleep 2; ib_send_bw -d rxe0 -x \$RXE_GID_INDEX -s 65536 -n 200 198.18.0.1" ib_send_bw -x 3 -s 65536 -n 200
interop_case "ib_send_bw: softverbs0 sends to rxe0" rxe \
  "ib_send_bw -d rxe0 -x \$RXE_GID_INDEX -s 65536 -n 200" ib_send_bw -x 3 -s 65536 -n 200
interop_case "ibv_ud_pingpong: rxe0 and softverbs0" softverbs \
  "sleep 2; ibv_ud_pingpong -d rxe0 -g \$RXE_GID_INDEX -n 200 -c 198.18.0.1" ibv_ud_pingpong -g 3 -n 200 -c

((failures == 0)) || exit 1
echo "interop: rxe and softverbs exchanged traffic in every case"
