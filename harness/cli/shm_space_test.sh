#!/usr/bin/env bash
# softverbs under a /dev/shm of limited size, as in a container (Docker
# gives 64 MiB by default). Each case mounts a tmpfs of its own on /dev/shm
# in a private mount namespace, so the host's /dev/shm is never touched:
#
#   - 64 MiB: 16 processes (8 ibv_rc_pingpong pairs, 64 KiB messages with
#     the received buffer checked) all complete;
#   - 1 MiB (not even the registry fits) and 3 MiB (the registry fits, a
#     mailbox does not): ibv_devinfo fails to open the device and says on
#     stderr what is missing and how to make room; no process dies of a
#     signal, and nothing is left in /dev/shm;
#   - 64 MiB with SOFTVERBS_MAILBOX_SLOTS=8192 (35 MiB a mailbox): the first
#     process fits, the second fails at open with the message, and with a
#     smaller SOFTVERBS_MAILBOX_SLOTS it fits beside the first;
#   - a SOFTVERBS_MAILBOX_SLOTS that is not a power of two in range is
#     refused at open with a message.
#
# Needs root and unshare(1) for the mount namespace: otherwise it exits 77,
# which ctest reports as skipped. Every program runs under timeout(1).
#
# Usage: shm_space_test.sh PATH/TO/softverbs
set -uo pipefail

cli=${1:?usage: shm_space_test.sh PATH/TO/softverbs}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
limit=${SHM_SPACE_TEST_TIMEOUT:-120}
export SOFTVERBS_SHM_PREFIX=${SOFTVERBS_SHM_PREFIX:-svshm}

if [[ ${SHM_SPACE_TEST_INSIDE:-} != yes ]]; then
  if (($(id -u) != 0)); then
    echo "skipped: needs root to mount a tmpfs on /dev/shm in a private mount namespace"
    exit 77
  fi
  if ! command -v unshare >/dev/null || ! timeout 10 unshare --mount true 2>/dev/null; then
    echo "skipped: unshare --mount is unavailable here"
    exit 77
  fi
  for tool in ibv_devinfo ibv_rc_pingpong; do
    if ! command -v $tool >/dev/null; then
      echo "$tool is missing (package ibverbs-utils); run scripts/setup.sh"
      exit 1
    fi
  done
  SHM_SPACE_TEST_INSIDE=yes exec timeout --kill-after=10 900 \
    unshare --mount --propagation private bash "${BASH_SOURCE[0]}" "$@"
fi

source "$here/../../scripts/lib/client-server.sh"
logs=$(mktemp -d)
trap 'umount /dev/shm 2>/dev/null; rm -rf "$logs"' EXIT

source "$here/../../scripts/lib/case-record.sh"

# with_dev_shm SIZE: a fresh, empty tmpfs of SIZE on /dev/shm (replacing the
# one the previous case mounted).
with_dev_shm() {
  umount /dev/shm 2>/dev/null
  mount -t tmpfs -o "size=$1,mode=1777" tmpfs /dev/shm
}

shm_left() {
  find /dev/shm -mindepth 1 -maxdepth 1 -name "$SOFTVERBS_SHM_PREFIX-*" | wc -l
}

# A status of 128 and up is a death by signal (124/137: timeout's).
died_of_signal() {
  (($1 >= 128)) && (($1 != 124))
}

# expect_refused NAME STATUS LOG PATTERN...: the program failed on its own
# (not by a signal) and its output says every PATTERN (grep -E).
expect_refused() {
  local name=$1 status=$2 log=$3 ok=yes
  shift 3
  if ((status == 0)) || died_of_signal "$status" || ((status == 124)); then
    echo "  $name: expected a failure to open the device, got: $(describe_status "$status")"
    ok=no
  fi
  for pattern in "$@"; do
    if ! grep -Eq -- "$pattern" "$log"; then
      echo "  $name: the output does not say /$pattern/"
      ok=no
    fi
  done
  [[ $ok == yes ]] || sed 's/^/  | /' "$log"
  [[ $ok == yes ]]
}

devinfo() {
  timeout --kill-after=5 "$limit" "$cli" run -- ibv_devinfo -d softverbs0 >"$1" 2>&1 </dev/null
}

# ---- 8 pingpong pairs in 64 MiB.
case_sixteen_processes() {
  local pairs=8 ports=() servers=() clients=() ok=yes i port
  with_dev_shm 64m
  local pingpong=(ibv_rc_pingpong -d softverbs0 -e -c -s 65536 -n 200)
  for ((i = 0; i < pairs; i++)); do
    port=$(free_tcp_port) || return 1
    while [[ " ${ports[*]} " == *" $port "* ]]; do port=$(free_tcp_port); done
    ports+=("$port")
    timeout --kill-after=5 "$limit" "$cli" run -- "${pingpong[@]}" -p "$port" \
      >"$logs/server$i.log" 2>&1 </dev/null &
    servers+=($!)
  done
  local deadline=$((SECONDS + limit))
  for ((i = 0; i < pairs; i++)); do
    until tcp_port_is_listening "${ports[i]}" || ((SECONDS >= deadline)); do sleep 0.05; done
  done
  echo "  8 servers up: /dev/shm $(df -h --output=used,size /dev/shm | tail -1 | xargs)"
  for ((i = 0; i < pairs; i++)); do
    timeout --kill-after=5 "$limit" "$cli" run -- "${pingpong[@]}" -p "${ports[i]}" localhost \
      >"$logs/client$i.log" 2>&1 </dev/null &
    clients+=($!)
  done
  for ((i = 0; i < pairs; i++)); do
    local side status
    for side in server client; do
      if [[ $side == server ]]; then wait "${servers[i]}"; else wait "${clients[i]}"; fi
      status=$?
      if ((status != 0)) || ! grep -q "bytes in .* seconds" "$logs/$side$i.log"; then
        echo "  pair $i $side: $(describe_status "$status")"
        sed 's/^/  | /' "$logs/$side$i.log"
        ok=no
      fi
    done
  done
  if (($(shm_left) != 0)); then
    echo "  segments left in /dev/shm: $(ls /dev/shm)"
    ok=no
  fi
  record sixteen_processes_in_64MiB $ok
}

# ---- Not even the registry fits; then the registry but no mailbox.
case_no_room() {
  local size=$1 what=$2 status ok=yes
  with_dev_shm "$size"
  devinfo "$logs/devinfo.log"
  status=$?
  expect_refused "devinfo_in_$size" "$status" "$logs/devinfo.log" \
    "no room in /dev/shm for the $what" "/dev/shm has .* free of" "docker run --shm-size=" \
    "mount -o remount,size=" "SOFTVERBS_MAILBOX_SLOTS" || ok=no
  if (($(shm_left) != 0)); then
    echo "  segments left in /dev/shm: $(ls /dev/shm)"
    ok=no
  fi
  record "open_fails_cleanly_in_${size}" $ok
}

# ---- Mailboxes too large for two processes; a smaller one fits.
case_large_mailboxes() {
  local ok=yes status port
  with_dev_shm 64m
  port=$(free_tcp_port) || return 1
  SOFTVERBS_MAILBOX_SLOTS=8192 timeout --kill-after=5 "$limit" "$cli" run -- \
    ibv_rc_pingpong -d softverbs0 -e -p "$port" >"$logs/holder.log" 2>&1 </dev/null &
  local holder=$!
  local deadline=$((SECONDS + limit))
  until tcp_port_is_listening "$port" || ((SECONDS >= deadline)); do sleep 0.05; done
  SOFTVERBS_MAILBOX_SLOTS=8192 devinfo "$logs/second.log"
  status=$?
  expect_refused second_large_mailbox "$status" "$logs/second.log" \
    "no room in /dev/shm for the mailbox of this process" || ok=no
  SOFTVERBS_MAILBOX_SLOTS=64 devinfo "$logs/small.log"
  status=$?
  if ((status != 0)) || ! grep -q "hca_id:.*softverbs0" "$logs/small.log"; then
    echo "  a 64-slot mailbox beside it: $(describe_status "$status")"
    sed 's/^/  | /' "$logs/small.log"
    ok=no
  fi
  kill -TERM "$holder" 2>/dev/null
  wait "$holder"
  status=$?
  if died_of_signal "$status" && ((status != 128 + 15)); then
    echo "  the first process: $(describe_status "$status")"
    ok=no
  fi
  record mailboxes_that_do_not_fit_fail_at_open $ok
}

case_bad_slot_count() {
  local status ok=yes
  with_dev_shm 64m
  SOFTVERBS_MAILBOX_SLOTS=1000 devinfo "$logs/bad.log"
  status=$?
  expect_refused bad_slot_count "$status" "$logs/bad.log" \
    "SOFTVERBS_MAILBOX_SLOTS='1000': must be a power of two from 64 to 8192" || ok=no
  record bad_slot_count_is_refused $ok
}

case_sixteen_processes
case_no_room 1m registry
case_no_room 3m "mailbox of this process"
case_large_mailboxes
case_bad_slot_count

report_cases
