#!/usr/bin/env bash
# `softverbs run --device-files`: the program finds the soft devices where
# tools look for a kernel device (/sys/class/infiniband/<dev>/...,
# /dev/infiniband/uverbs_<dev>), with the identity `softverbs devices`
# prints; nothing of it shows outside the program; ucx_info lists the device.
# Exit 77 (skipped) when this kernel lets no namespace be made here.
#
# Usage: device_files_test.sh PATH/TO/softverbs
#   DEVICE_FILES_SKIP_UCX=1 leaves out the ucx_info check (UCX's own memory
#   hooks do not run under ThreadSanitizer).
set -uo pipefail

cli=${1:?usage: device_files_test.sh PATH/TO/softverbs}
unset SOFTVERBS_DEVICES SOFTVERBS_DEVICE_FILES
failures=0
checks=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() {  # check DESCRIPTION EXPECTED ACTUAL
  checks=$((checks + 1))
  [[ $2 == "$3" ]] || fail "$1: expected '$2', got '$3'"
}

if ! "$cli" run --device-files -- test -d /sys/class/infiniband/softverbs0 2>/dev/null; then
  echo "skipped: no mount namespace here ($("$cli" run --device-files -- true 2>&1 | head -1))"
  exit 77
fi

row=$("$cli" devices | awk '$1 == "softverbs0"')
guid=$(awk '{print $2}' <<<"$row")
lid=$(awk '{print $4}' <<<"$row")
sys=/sys/class/infiniband/softverbs0
inside=$("$cli" run --device-files -- sh -c "
  cat $sys/node_guid $sys/ports/1/lid $sys/ports/1/state $sys/ports/1/link_layer $sys/ports/1/gids/0
  stat -c %F /dev/infiniband/uverbs_softverbs0
  test -r /dev/infiniband/uverbs_softverbs0 -a -w /dev/infiniband/uverbs_softverbs0 && echo rw
  test -d /sys/class/net && test -e /dev/null && test -d /dev/shm && echo others-kept
  touch $sys/new 2>/dev/null || echo read-only")
mapfile -t lines <<<"$inside"
check "node_guid" "$guid" "${lines[0]}"
check "ports/1/lid" "$(printf '0x%x' "$lid")" "${lines[1]}"
check "ports/1/state" "4: ACTIVE" "${lines[2]}"
check "ports/1/link_layer" "InfiniBand" "${lines[3]}"
check "gids/0 is fe80::GUID" "fe80:0000:0000:0000:${guid}" "${lines[4]}"
check "the device node" "character special file" "${lines[5]}"
check "the device node may be read and written" "rw" "${lines[6]}"
check "everything else of /sys/class and /dev" "others-kept" "${lines[7]}"
check "the made files" "read-only" "${lines[8]}"

checks=$((checks + 1))
[[ ! -e $sys ]] || fail "$sys shows outside the program"
check "--no-device-files" "absent" \
  "$("$cli" run --no-device-files -- sh -c "test -e $sys && echo present || echo absent")"
check "a nested run makes its own devices" "softverbs0 softverbs1" \
  "$("$cli" run --device-files --devices 3 -- "$cli" run --device-files --devices 2 -- \
       sh -c 'echo $(ls /sys/class/infiniband)')"

# device/net/: the interfaces that hold the device's addresses, where
# rdma-core's test suite looks for the address its connection manager
# tests use. In network namespaces this test makes (root only): one with an
# up veth that has an address and a peer that is down, one with only lo.
if [[ $(id -u) == 0 ]] && command -v ip >/dev/null && ip netns add "softverbs-df-$$" 2>/dev/null; then
  ns=softverbs-df-$$
  bare=softverbs-df-lo-$$
  trap 'ip netns del "$ns" 2>/dev/null; ip netns del "$bare" 2>/dev/null' EXIT
  ip -n "$ns" link set lo up
  ip -n "$ns" link add sv-df0 type veth peer name sv-df1
  ip -n "$ns" addr add 10.199.0.1/24 dev sv-df0
  ip -n "$ns" link set sv-df0 up
  in_ns=$(ip netns exec "$ns" "$cli" run --device-files --devices 2 -- sh -c "
    echo \$(ls $sys/device/net)
    readlink $sys/device/net/sv-df0
    cat $sys/device/net/sv-df0/address
    test -e /sys/class/infiniband/softverbs1/device && echo present || echo absent")
  mapfile -t lines <<<"$in_ns"
  check "device/net/: the up interfaces with the device's addresses, not lo" "sv-df0" "${lines[0]}"
  check "device/net/sv-df0 links to the interface" "/sys/class/net/sv-df0" "${lines[1]}"
  check "the interface's files through it" "$(ip -n "$ns" -br link show sv-df0 | awk '{print $3}')" "${lines[2]}"
  check "softverbs1 (an alias on lo) has no device/" "absent" "${lines[3]}"
  ip netns add "$bare"
  ip -n "$bare" link set lo up
  check "no device/ where only lo is up" "absent" \
    "$(ip netns exec "$bare" "$cli" run --device-files -- sh -c "test -e $sys/device && echo present || echo absent")"
else
  echo "note: not root or no ip netns here; device/net/ was not checked"
fi

# Another user, unprivileged: through a user namespace, ids mapped to
# themselves. Only where this runs as root and has setpriv to become nobody.
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null; then
  as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  check "unprivileged, default: no files" "absent" \
    "$("${as_nobody[@]}" "$cli" run -- sh -c "test -e $sys && echo present || echo absent")"
  out=$("${as_nobody[@]}" "$cli" run --device-files -- sh -c "id -u; stat -c %u $sys/node_guid" 2>&1)
  if [[ $out == *"no /sys/class/infiniband"* ]]; then
    echo "note: no unprivileged user namespaces here; that case was not checked"
  else
    check "unprivileged: uid and file owner" "65534 65534" "$(echo $out)"
  fi
fi

# infiniband-diags' ibstat (libibumad's sysfs reads) and ibstatus (a
# script over the port files) show the devices as they show an HCA.
if command -v ibstat >/dev/null && command -v ibstatus >/dev/null; then
  version=$("$cli" --version | cut -d' ' -f2)
  ibstat=$("$cli" run --device-files --devices 2 -- ibstat 2>&1)
  check "ibstat's devices" "CA 'softverbs0' CA 'softverbs1'" \
    "$(grep -o "^CA '[^']*'" <<<"$ibstat" | tr '\n' ' ' | sed 's/ $//')"
  check "ibstat's firmware version" "Firmware version: $version" \
    "$(grep -m1 -o 'Firmware version: .*' <<<"$ibstat")"
  check "ibstat's port state and base LID" "State: Active Base lid: $((lid)) SM lid: 1" \
    "$(awk '/CA .softverbs0/ { on = 1 } on && /State:|Base lid:|SM lid:/ { sub(/^[ \t]+/, ""); printf "%s%s", sep, $0; sep = " " }
            on && /SM lid:/ { exit }' <<<"$ibstat")"
  check "ibstat's port GUID" "Port GUID: 0x${guid//:/}" "$(grep -m1 -o 'Port GUID: .*' <<<"$ibstat")"
  ibstatus=$("$cli" run --device-files -- ibstatus softverbs0 2>&1)
  check "ibstatus' state" "state: 4: ACTIVE" "$(grep -o 'state:[[:space:]]*4: ACTIVE' <<<"$ibstatus" | tr -s '\t ' ' ' | head -1)"
else
  echo "note: ibstat/ibstatus are missing (package infiniband-diags); they were not checked"
fi

if [[ ${DEVICE_FILES_SKIP_UCX:-0} == 1 ]]; then
  echo "note: UCX not checked (DEVICE_FILES_SKIP_UCX=1)"
elif command -v ucx_info >/dev/null; then
  ucx=$("$cli" run --device-files -- ucx_info -d 2>&1)
  checks=$((checks + 1))
  grep -q "Memory domain: softverbs0" <<<"$ucx" || fail "ucx_info -d lists no softverbs0 memory domain"
  checks=$((checks + 1))
  grep -A1 "Transport: rc_verbs" <<<"$ucx" | grep -q "Device: softverbs0:1" ||
    fail "ucx_info -d lists no rc_verbs transport on softverbs0:1"
else
  echo "note: ucx_info is missing (package ucx-utils); UCX was not checked"
fi

echo "$checks checks, $failures failed"
((failures == 0))
