#!/usr/bin/env bash
# QEMU live migration over RDMA between two qemus of one host, both under
# `softverbs run`: the destination waits with -incoming rdma:127.0.0.1:PORT,
# the source runs `migrate -d rdma:127.0.0.1:PORT`; on InfiniBand and RoCE,
# with rdma-pin-all off and on (set on both sides). Guest RAM is a shared
# file the test fills with random bytes; the source's vCPU keeps rewriting
# 512 KiB of it while it migrates. Passes when every migration completes, the
# destination's RAM file equals the source's at its stop, the rest of which
# still holds the random bytes, and qemu's frames went through softverbs.
#
# Usage: qemu_migration_test.sh PATH/TO/softverbs
set -uo pipefail
test_name=qemu_migration
source "$(dirname "${BASH_SOURCE[0]}")/ecosystem_lib.sh"
need_packages qemu-system-x86 python3

ram_mib=128
qemus=()
stop_qemus() {
  ((${#qemus[@]})) || return 0
  kill "${qemus[@]}" 2>/dev/null
  wait "${qemus[@]}" 2>/dev/null
  qemus=()
}
# The qemus go before the lib's cleanup resets the registry under them.
trap 'stop_qemus; cleanup' EXIT

# HMP commands through QMP (no socat or nc needed): hmp SOCKET COMMAND...
# prints each command's output. Waits up to 10 s for the socket to appear.
cat >"$work/hmp.py" <<'EOF'
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
for attempt in range(100):
    try:
        s.connect(sys.argv[1])
        break
    except OSError:
        time.sleep(0.1)
else:
    sys.exit("no QMP socket at " + sys.argv[1])
f = s.makefile("rw")
def call(command, **arguments):
    f.write(json.dumps({"execute": command, "arguments": arguments}) + "\n")
    f.flush()
    while True:  # skip events
        reply = json.loads(f.readline())
        if "return" in reply or "error" in reply:
            return reply
f.readline()  # greeting
call("qmp_capabilities")
for line in sys.argv[2:]:
    reply = call("human-monitor-command", **{"command-line": line})
    print(str(reply.get("return", reply)).replace("\r\n", "\n"), end="")
EOF
hmp() { bounded 20 /usr/bin/python3 "$work/hmp.py" "$@"; }
migration_status() { hmp "$1" "info migrate" | sed -n 's/^Migration status: //p'; }

# The guest: no OS, a 64 KiB firmware that rewrites physical 0x10000-0x8ffff
# with a counter forever (real mode), so pages are dirtied and sent again
# while the migration runs. At the reset vector (offset 0xfff0): jmp 0.
#   0: xor ax,ax
#   2: mov dx,0x1000 / 5: mov es,dx / xor di,di / mov cx,0x8000 / rep stosw
#      add dx,0x1000 / cmp dx,0x9000 / jb 5 / inc ax / jmp 2
dirty_start=$((0x10000)) dirty_end=$((0x90000))
{
  printf '\x31\xc0\xba\x00\x10\x8e\xc2\x31\xff\xb9\x00\x80\xf3\xab'
  printf '\x81\xc2\x00\x10\x81\xfa\x00\x90\x72\xed\x40\xeb\xe7'
} >"$work/bios.bin"
truncate -s $((0xfff0)) "$work/bios.bin"
printf '\xe9\x0d\x00' >>"$work/bios.bin"
truncate -s 64K "$work/bios.bin"

# start_qemu NAME ARGS...: a machine stopped before its first instruction
# (-S) whose RAM is the file NAME.ram, shared so that what qemu receives
# lands in the file; monitor at NAME.sock, stderr in NAME-LABEL.log. The
# trace events say whether rdma-pin-all was agreed on. timeout itself, not
# `bounded`: a function run with & is a subshell, and killing its PID ($!)
# would leave timeout and qemu running.
start_qemu() {
  local name=$1
  shift
  timeout -k 5 60 "$cli" run -- qemu-system-x86_64 -machine pc,memory-backend=ram -m ${ram_mib}M \
    -object memory-backend-file,id=ram,size=${ram_mib}M,mem-path="$work/$name.ram",share=on \
    -nodefaults -nographic -bios "$work/bios.bin" -S -qmp unix:"$work/$name.sock",server=on,wait=off \
    -trace qemu_rdma_connect_pin_all_outcome -trace qemu_rdma_accept_pin_state \
    "$@" >"$work/$name-$label.log" 2>&1 &
  qemus+=($!)
}

# wait_status SOCKET SECONDS: until migration on that side ends (or SECONDS
# pass); prints the last status.
wait_status() {
  local status deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    status=$(migration_status "$1") || break  # qemu is gone
    [[ $status == completed || $status == failed || $status == cancelled ]] && break
    sleep 0.2
  done
  echo "${status:-no answer}"
}

# Random bytes, so that no page is a zero or same-byte page that qemu
# would send as a marker instead of writing it over RDMA.
head -c $((ram_mib << 20)) /dev/urandom >"$work/random.ram"

migrate() {  # migrate LINK_LAYER on|off
  local link_layer=$1 pin=$2 port source_status dest_status i
  label=$link_layer-pin-$pin
  export SOFTVERBS_LINK_LAYER=$link_layer
  cp "$work/random.ram" "$work/source.ram"
  rm -f "$work/dest.ram" "$work"/*.sock
  truncate -s ${ram_mib}M "$work/dest.ram"

  port=$(free_tcp_port)
  start_qemu dest -incoming rdma:127.0.0.1:"$port"
  wait_for_listener "$port"
  start_qemu source
  hmp "$work/dest.sock" "migrate_set_capability rdma-pin-all $pin"
  # The destination stays stopped (-S) after the migration: its RAM is what
  # arrived. The source runs until the migration stops it.
  hmp "$work/source.sock" "migrate_set_capability rdma-pin-all $pin" cont "migrate -d rdma:127.0.0.1:$port"
  source_status=$(wait_status "$work/source.sock" 20)
  # RAM is written by the source's RDMA writes; the destination also loads
  # the device state and must have finished before its file is compared
  # (a moment after the source).
  dest_status=$(wait_status "$work/dest.sock" 5)
  local info
  info=$(hmp "$work/source.sock" "info migrate")
  stop_qemus

  check
  [[ $source_status == completed && $dest_status == completed ]] ||
    fail "$label: migration ended source $source_status, destination $dest_status"
  # qemu names the device it opened and its link layer ("transport").
  local transport='(1) Infiniband' agreed=0
  [[ $link_layer == eth ]] && transport='(2) Ethernet'
  check
  grep -q "kernel name softverbs0 .*transport: $transport" "$work/source-$label.log" &&
    grep -q "kernel name softverbs0 .*transport: $transport" "$work/dest-$label.log" ||
    fail "$label: qemu did not say it migrated over softverbs0 with transport $transport"
  [[ $pin == on ]] && agreed=1
  check
  grep -qx "qemu_rdma_connect_pin_all_outcome $agreed" "$work/source-$label.log" &&
    grep -qx "qemu_rdma_accept_pin_state $agreed" "$work/dest-$label.log" ||
    fail "$label: qemu's trace does not show rdma-pin-all $pin on both sides"
  # Outside the guest's window the source must still hold the random bytes
  # (equal files could be two copies of something qemu wrote), inside it
  # not (the guest ran).
  check
  cmp -s -n $dirty_start "$work/source.ram" "$work/random.ram" &&
    cmp -s -i $dirty_end "$work/source.ram" "$work/random.ram" ||
    fail "$label: the source's RAM outside the guest's window is not the random bytes written"
  check
  ! cmp -s -i $dirty_start -n $((dirty_end - dirty_start)) "$work/source.ram" "$work/random.ram" ||
    fail "$label: the source's guest did not run (its window still holds the random bytes)"
  check
  if cmp -s "$work/dest.ram" "$work/source.ram"; then
    echo "$test_name: $link_layer rdma-pin-all $pin: $ram_mib MiB identical," \
      "$(sed -n 's/^total time: //p' <<<"$info") total, $(sed -n 's/^downtime: //p' <<<"$info") downtime," \
      "$(sed -n 's/^transferred ram: //p' <<<"$info") sent, $(sed -n 's/^dirty sync count: //p' <<<"$info") dirty syncs"
  else
    fail "$label: the destination's RAM differs from the source's ($(cmp "$work/dest.ram" "$work/source.ram" 2>&1 | head -1))"
  fi
}

# comm is cut to 15 characters: qemu-system-x86_64 shows as qemu-system-x86.
watch_traffic qemu-system-x86
for link_layer in ib eth; do
  for pin in off on; do migrate "$link_layer" "$pin"; done
done
check_traffic
((failures == 0)) || tail -n 5 "$work"/*.log
finish
