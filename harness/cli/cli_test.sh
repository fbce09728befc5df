#!/usr/bin/env bash
# Checks the softverbs CLI from the outside: exit statuses and messages of
# misuse, the device table, and the environment `run` gives a program.
# Usage: cli_test.sh PATH/TO/softverbs
set -uo pipefail

cli=${1:?usage: cli_test.sh PATH/TO/softverbs}
[[ -x $cli ]] || { echo "not executable: $cli" >&2; exit 2; }

# The checks below set what they need; nothing from the caller's environment.
unset SOFTVERBS_DEVICES SOFTVERBS_LINK_LAYER SOFTVERBS_LIBRARY LD_PRELOAD

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

failures=0
checks=0
out="$scratch/out"
err="$scratch/err"

fail() {
  echo "FAIL: $*"
  echo "  stdout: $(head -c 2000 "$out")"
  echo "  stderr: $(head -c 2000 "$err")"
  failures=$((failures + 1))
}

# run_cli: runs the CLI (with the given extra environment via `env`), keeps
# its status in $status and its streams in $out / $err.
run_cli() {
  env "$@" >"$out" 2>"$err" </dev/null
  status=$?
}

# expect STATUS STREAM REGEX DESCRIPTION
expect() {
  local want=$1 stream=$2 pattern=$3 what=$4
  checks=$((checks + 1))
  if [[ $status -ne $want ]]; then
    fail "$what: exit status $status, expected $want"
  elif [[ -n $pattern ]] && ! grep -Eq -- "$pattern" "$stream"; then
    fail "$what: $(basename "$stream") does not match /$pattern/"
  fi
}

# --- help and misuse -------------------------------------------------------
run_cli "$cli"
expect 2 "$err" 'no command given' "no arguments"
expect 2 "$err" 'usage: softverbs COMMAND' "no arguments shows usage"

for help in --help -h help; do
  run_cli "$cli" $help
  expect 0 "$out" 'run \[--devices N\] \[--\[no-\]device-files\] \[--seed N\] \[--trace DIR\]' "$help"
  expect 0 "$out" 'devices' "$help lists devices"
  expect 0 "$out" 'capture -o FILE' "$help lists capture"
  expect 0 "$out" 'topo \[--name NAME\]' "$help lists topo"
  expect 0 "$out" 'trace diff DIR_A DIR_B' "$help lists trace"
  expect 0 "$out" 'fault \[--pid PID\]' "$help lists fault"
done

run_cli "$cli" help run
expect 0 "$out" '^usage: softverbs run ' "help run"
run_cli "$cli" run --help
expect 0 "$out" '^usage: softverbs run ' "run --help"
run_cli "$cli" help devices
expect 0 "$out" '^usage: softverbs devices' "help devices"
# Every command answers --help with its usage and status 0.
for command in run devices listeners stats fault port rnr reset topo capture trace; do
  for help in --help -h; do
    run_cli "$cli" $command $help
    expect 0 "$out" '^usage: softverbs ' "$command $help"
  done
done
run_cli "$cli" --version
expect 0 "$out" '^softverbs [0-9]+\.[0-9]+\.[0-9]+$' "--version"
run_cli "$cli" help nonsense
expect 2 "$err" "no command named 'nonsense'" "help of an unknown command"

run_cli "$cli" frobnicate
expect 2 "$err" "unknown command 'frobnicate'" "unknown command"
expect 2 "$err" 'usage: softverbs COMMAND' "unknown command shows usage"

run_cli "$cli" capture
expect 2 "$err" "say where to write with -o FILE.pcapng" "capture without a file"
run_cli "$cli" capture -o x.pcapng
expect 2 "$err" "no program given" "capture without a program"
run_cli "$cli" capture -o x.pcapng --qp twelve -- true
expect 2 "$err" "is not a QP number" "capture with a bad QP number"
run_cli "$cli" capture --bogus
expect 2 "$err" "unknown option '--bogus'" "capture with an unknown option"
run_cli "$cli" topo up
expect 2 "$err" "give a host number" "topo up without a count"
run_cli "$cli" topo sideways
expect 2 "$err" "unknown action 'sideways'" "topo with an unknown action"

# --- control requests: misuse, and no program to talk to -----------------
ctl_env=(SOFTVERBS_SHM_PREFIX="svcli$$")
run_cli "${ctl_env[@]}" "$cli" stats
expect 1 "$err" 'no running program uses softverbs' "stats with no program running"
run_cli "${ctl_env[@]}" "$cli" stats --pid
expect 2 "$err" '--pid needs a process id' "stats --pid without a value"
run_cli "${ctl_env[@]}" "$cli" stats --pid abc
expect 2 "$err" "'abc' is not a process id" "stats --pid not a number"
run_cli "${ctl_env[@]}" "$cli" stats --pid 1
expect 1 "$err" 'has no softverbs control socket' "stats of a process without softverbs"
run_cli "${ctl_env[@]}" "$cli" fault frob
expect 2 "$err" "unknown request 'frob'" "fault with an unknown request"
run_cli "${ctl_env[@]}" "$cli" fault set
expect 2 "$err" 'no plan given' "fault set without a plan"
run_cli "${ctl_env[@]}" "$cli" port softverbs0 sideways
expect 2 "$err" 'up or down' "port with a bad state"
run_cli "${ctl_env[@]}" "$cli" rnr
expect 2 "$err" 'say off, all or a QPN' "rnr without an argument"
run_cli "$cli" help fault
expect 0 "$out" '^usage: softverbs stats' "help fault"

run_cli "$cli" run
expect 2 "$err" "missing '--'" "run without --"
expect 2 "$err" 'softverbs run -- PROGRAM' "run without -- says what to type"

run_cli "$cli" run ibv_devinfo -v
expect 2 "$err" "missing '--' before the program" "run PROGRAM without --"
expect 2 "$err" 'type: softverbs run -- ibv_devinfo -v' "run PROGRAM without -- suggests the command"

run_cli "$cli" run --
expect 2 "$err" "no program after '--'" "run -- with no program"

run_cli "$cli" run --verbose -- true
expect 2 "$err" "unknown option '--verbose'" "run with an unknown option"

run_cli "$cli" run --devices
expect 2 "$err" '--devices needs a number' "run --devices without a value"

run_cli SOFTVERBS_LIBRARY=/bin/true "$cli" run --devices 99 -- true
expect 2 "$err" "SOFTVERBS_DEVICES='99'" "run --devices out of range"

run_cli SOFTVERBS_LIBRARY=/bin/true "$cli" run --devices=two -- true
expect 2 "$err" "SOFTVERBS_DEVICES='two'" "run --devices=not-a-number"

run_cli "$cli" run --seed seven -- true
expect 2 "$err" "'seven' is not a seed" "run --seed with a word"

run_cli "$cli" run --seed
expect 2 "$err" '--seed needs a number' "run --seed without a value"

# The run's seed reaches the program and is announced with a plan in force.
run_cli SOFTVERBS_FAULTS='drop:p=0.1' "$cli" run --seed 42 -- env
expect 0 "$out" '^SOFTVERBS_FAULT_SEED=42$' "run --seed sets SOFTVERBS_FAULT_SEED"
expect 0 "$err" 'fault plan seed 42 \(replay with: softverbs run --seed 42' "run announces the seed"

run_cli SOFTVERBS_FAULTS='seed=9; drop:p=0.1' "$cli" run -- true
expect 0 "$err" 'fault plan seed 9 ' "run announces the plan's own seed"

run_cli "$cli" devices --all
expect 2 "$err" "unexpected argument '--all'" "devices with an unknown argument"

run_cli "$cli" listeners --all
expect 2 "$err" "unexpected argument '--all'" "listeners with an unknown argument"

run_cli "$cli" help listeners
expect 0 "$out" '^usage: softverbs listeners' "help listeners"

# --- listeners ---------------------------------------------------------------
# A server of the test's own prefix listens; the table names its port.
listen_prefix="svclilisten$$"
SOFTVERBS_SHM_PREFIX=$listen_prefix timeout 20 "$cli" run -- rping -s -a 127.0.0.1 -p 7399 -C 1 \
  >/dev/null 2>&1 &
listener_pid=$!
for _ in $(seq 1 100); do
  run_cli SOFTVERBS_SHM_PREFIX=$listen_prefix "$cli" listeners
  grep -q ':7399 ' "$out" && break
  sleep 0.1
done
expect 0 "$out" '^space +address:port +pid' "listeners header"
expect 0 "$out" '^tcp +\*:7399 +[0-9]+' "listeners shows rping's port (loopback binds as any)"
kill "$listener_pid" 2>/dev/null
wait "$listener_pid" 2>/dev/null
rm -f "/dev/shm/$listen_prefix-"*

# --- devices ---------------------------------------------------------------
run_cli SOFTVERBS_DEVICES= "$cli" devices
expect 0 "$out" '^device +node GUID +link layer +LID +GID\[0\]' "devices header"
expect 0 "$out" '^softverbs0 ' "devices lists softverbs0"
rows=$(grep -c '^softverbs' "$out")
checks=$((checks + 1))
[[ $rows -eq 1 ]] || fail "default device count: $rows rows, expected 1"

# The GID 0 of an InfiniBand port is fe80::/64 followed by the node GUID.
checks=$((checks + 1))
while read -r name guid link lid gid; do
  [[ $link == InfiniBand ]] || fail "$name: link layer $link, expected InfiniBand"
  [[ $gid == "fe80:0000:0000:0000:$guid" ]] || fail "$name: GID0 $gid does not carry GUID $guid"
  [[ $lid =~ ^0x[0-9a-f]{4}$ && $lid != 0x0000 ]] || fail "$name: LID $lid is not a unicast LID"
done < <(grep '^softverbs' "$out")

run_cli SOFTVERBS_DEVICES=3 "$cli" devices
expect 0 "$out" '^softverbs2 ' "SOFTVERBS_DEVICES=3 lists softverbs2"
checks=$((checks + 1))
distinct() { grep '^softverbs' "$out" | awk -v c="$1" '{print $c}' | sort -u | wc -l; }
[[ $(distinct 1) -eq 3 && $(distinct 2) -eq 3 && $(distinct 4) -eq 3 ]] ||
  fail "three devices must have three names, GUIDs and LIDs"

run_cli "$cli" devices --devices 2
expect 0 "$out" '^softverbs1 ' "devices --devices 2"
checks=$((checks + 1))
[[ $(grep -c '^softverbs' "$out") -eq 2 ]] || fail "devices --devices 2 shows other than 2 rows"

run_cli SOFTVERBS_PORTS=2 "$cli" devices --devices 2
expect 0 "$out" '^softverbs1/2 .* 0x0012 ' "SOFTVERBS_PORTS=2 shows each device's port 2 with its own LID"
checks=$((checks + 1))
[[ $(distinct 4) -eq 4 && $(distinct 5) -eq 4 ]] || fail "four ports must have four LIDs and GIDs"
run_cli SOFTVERBS_PORTS=3 "$cli" devices
expect 2 "$err" "SOFTVERBS_PORTS='3' is not a port count of 1 or 2" "SOFTVERBS_PORTS out of range"

run_cli SOFTVERBS_DEVICES=0 "$cli" devices
expect 0 "$out" 'no soft devices' "SOFTVERBS_DEVICES=0"

run_cli SOFTVERBS_DEVICES=many "$cli" devices
expect 2 "$err" "SOFTVERBS_DEVICES='many'" "bad SOFTVERBS_DEVICES"

run_cli SOFTVERBS_LINK_LAYER=token-ring "$cli" devices
expect 2 "$err" "SOFTVERBS_LINK_LAYER='token-ring'" "bad SOFTVERBS_LINK_LAYER"

# One link layer per device: the list alone sets the count; a RoCE device
# has no LID.
run_cli SOFTVERBS_LINK_LAYER=ib,eth "$cli" devices
expect 0 "$out" '^softverbs1 +[0-9a-f:]+ +Ethernet +0x0000 ' "SOFTVERBS_LINK_LAYER=ib,eth"
expect 0 "$out" '^softverbs0 +[0-9a-f:]+ +InfiniBand +0x0001 ' "SOFTVERBS_LINK_LAYER=ib,eth"

run_cli SOFTVERBS_DEVICES=3 SOFTVERBS_LINK_LAYER=ib,eth "$cli" devices
expect 2 "$err" "one link layer per device" "a link layer list of the wrong length"

# --- run: finding the library, LD_PRELOAD, exec ---------------------------
# A stand-in for libsoftverbs.so that is a real shared object, so ld.so loads
# it without complaint: a copy of the C math library the CLI itself uses.
libm=$(ldd "$cli" | awk '$1 ~ /^libm\.so/ {print $3}')
if [[ ! -f $libm ]]; then
  echo "cannot find libm next to the CLI; ldd says:"; ldd "$cli"
  exit 1
fi
mkdir -p "$scratch/lib"
stand_in="$scratch/lib/libsoftverbs.so"
cp "$libm" "$stand_in"

run_cli SOFTVERBS_LIBRARY="$stand_in" LD_PRELOAD= "$cli" run -- env
expect 0 "$out" "^LD_PRELOAD=(.*:)?$stand_in\$" "run -- env preloads SOFTVERBS_LIBRARY"

# A sanitizer build of the CLI itself only starts with its runtime first in
# LD_PRELOAD, so an existing value keeps that in front.
sanitizer_runtime=$(ldd "$cli" | awk '$1 ~ /^lib[at]san\.so/ {print $3}')
existing_prefix=${sanitizer_runtime:+$sanitizer_runtime:}

run_cli SOFTVERBS_LIBRARY="$stand_in" LD_PRELOAD="$existing_prefix$libm" "$cli" run -- env
expect 0 "$out" "^LD_PRELOAD=(.*:)?$stand_in:(.*:)?$libm\$" "run prepends to an existing LD_PRELOAD"

run_cli SOFTVERBS_LIBRARY="$stand_in" LD_PRELOAD="$existing_prefix$stand_in" "$cli" run -- env
checks=$((checks + 1))
[[ $(grep '^LD_PRELOAD=' "$out" | grep -o "$stand_in" | wc -l) -eq 1 ]] ||
  fail "run adds libsoftverbs.so twice when it is already preloaded"

run_cli SOFTVERBS_LIBRARY="$stand_in" "$cli" run --devices 2 -- env
expect 0 "$out" '^SOFTVERBS_DEVICES=2$' "run --devices 2 sets SOFTVERBS_DEVICES"

# awk, not a shell: a ThreadSanitizer runtime preloaded into a shell crashes
# it at exit, and a TSan build of the CLI preloads that runtime.
run_cli SOFTVERBS_LIBRARY="$stand_in" "$cli" run -- awk 'BEGIN { exit 7 }'
expect 7 "" "" "run passes the program's exit status through"

run_cli SOFTVERBS_LIBRARY="$stand_in" "$cli" run -- /nonexistent/program
expect 127 "$err" 'command not found' "run of a missing program"
run_cli SOFTVERBS_LIBRARY="$stand_in" "$cli" run -- softverbs-no-such-program-on-path
expect 127 "$err" 'softverbs-no-such-program-on-path: command not found' "run of a program not on PATH"
run_cli SOFTVERBS_LIBRARY="$stand_in" "$cli" run -- "$scratch"
expect 126 "$err" 'cannot run' "run of a directory"

run_cli SOFTVERBS_LIBRARY="$scratch/missing.so" "$cli" run -- true
expect 1 "$err" "SOFTVERBS_LIBRARY=$scratch/missing.so is not a file" "missing SOFTVERBS_LIBRARY"

# A copy of the CLI with no library beside it must say how to build one.
mkdir -p "$scratch/alone/bin"
cp "$cli" "$scratch/alone/bin/softverbs"
run_cli -u SOFTVERBS_LIBRARY "$scratch/alone/bin/softverbs" run -- true
expect 1 "$err" 'libsoftverbs.so not found' "CLI without a library"
expect 1 "$err" 'scripts/build.sh' "CLI without a library says how to build it"

# The installed layout: <prefix>/bin/softverbs finds <prefix>/lib/libsoftverbs.so.
mkdir -p "$scratch/alone/lib"
cp "$stand_in" "$scratch/alone/lib/libsoftverbs.so"
run_cli -u SOFTVERBS_LIBRARY LD_PRELOAD= "$scratch/alone/bin/softverbs" run -- env
expect 0 "$out" "^LD_PRELOAD=(.*:)?$scratch/alone/lib/libsoftverbs.so\$" "installed layout"

# In the build tree the real library sits at <build>/provider/libsoftverbs.so.
cli_dir=$(cd "$(dirname "$cli")" && pwd)
built_library=$(realpath -m "$cli_dir/../../provider/libsoftverbs.so")
if [[ -f $built_library ]]; then
  # Then the libibverbs.so.1 shim beside it, then the system's libibverbs,
  # whose path the library is also told.
  shim=$(realpath -m "$cli_dir/../../provider/ibverbs-shim/libibverbs.so.1")
  run_cli -u SOFTVERBS_LIBRARY -u SOFTVERBS_REAL_LIBIBVERBS -u SOFTVERBS_IBVERBS_SHIM LD_PRELOAD= \
    "$cli" run -- env
  expect 0 "$out" "^LD_PRELOAD=(.*:)?$built_library:$shim:/[^:]*libibverbs\.so\.1[.0-9]*\$" \
    "run -- env preloads the built libsoftverbs.so, the shim and the system libibverbs"
  expect 0 "$out" "^SOFTVERBS_REAL_LIBIBVERBS=/[^:]*libibverbs\.so\.1[.0-9]*\$" \
    "run names the system libibverbs to the library"
  run_cli -u SOFTVERBS_LIBRARY SOFTVERBS_IBVERBS_SHIM=0 LD_PRELOAD= "$cli" run -- env
  expect 0 "$out" "^LD_PRELOAD=(.*:)?$built_library\$" "SOFTVERBS_IBVERBS_SHIM=0 preloads the library alone"
else
  echo "note: $built_library is not built; the build-tree lookup was not checked"
fi

# --- control requests against a live program --------------------------------
# An ibv_rc_pingpong server waits for its client with softverbs0 open, so it
# answers on its control socket the whole time.
if [[ -f $built_library ]] && command -v ibv_rc_pingpong >/dev/null; then
  live_env=(SOFTVERBS_SHM_PREFIX="svclilive$$")
  port=$((20000 + RANDOM % 12000))  # below the ephemeral range (32768 on)
  env "${live_env[@]}" timeout 60 "$cli" run -- ibv_rc_pingpong -d softverbs0 -p "$port" \
    >"$scratch/server.log" 2>&1 </dev/null &
  server=$!
  live_pid=
  for _ in $(seq 1 100); do
    live_pid=$(env "${live_env[@]}" "$cli" stats 2>/dev/null | awk '/^process/ {print $2; exit}')
    [[ -n $live_pid ]] && break
    sleep 0.05
  done
  checks=$((checks + 1))
  if [[ -z $live_pid ]]; then
    fail "a program under softverbs run never answered stats"
  else
    run_cli "${live_env[@]}" "$cli" stats --pid "$live_pid"
    expect 0 "$out" '^device softverbs0 port 1 ACTIVE: packets_sent=' "stats of a live program"
    printf '# a comment line\nseed=3  # the seed\ndrop:p=0.25,dir=tx\n\ndup:qp=0x12,nth=2\n' >"$scratch/plan"
    run_cli "${live_env[@]}" "$cli" fault --pid "$live_pid" set --file "$scratch/plan"
    expect 0 "$out" '^ok: seed=3; drop:dir=tx,p=0.25; dup:qp=0x12,nth=2' "fault set --file with comments"
    run_cli "${live_env[@]}" "$cli" fault --pid "$live_pid" show
    expect 0 "$out" 'drop:dir=tx,p=0.25' "fault show"
    run_cli "${live_env[@]}" "$cli" fault --pid "$live_pid" set 'drp:p=1'
    expect 1 "$err" "unknown action 'drp'" "fault set with a bad plan says what is wrong"
    run_cli "${live_env[@]}" "$cli" fault --pid "$live_pid" clear
    expect 0 "$out" 'ok: no faults' "fault clear"
    run_cli "${live_env[@]}" "$cli" port --pid "$live_pid" softverbs0 down
    expect 0 "$out" 'ok: softverbs0 port 1 down' "port down"
    run_cli "${live_env[@]}" "$cli" stats --pid "$live_pid"
    expect 0 "$out" '^device softverbs0 port 1 DOWN' "stats shows the port down"
    run_cli "${live_env[@]}" "$cli" port --pid "$live_pid" softverbs9 up
    expect 1 "$err" "no soft device named 'softverbs9'" "port of an unknown device"
    run_cli "${live_env[@]}" "$cli" rnr --pid "$live_pid" all
    expect 0 "$out" 'forced RNR on every QP' "rnr all"
    run_cli "${live_env[@]}" "$cli" port --pid "$live_pid" softverbs0 2 down
    expect 1 "$err" "softverbs0 has no port '2' \(it has 1\)" "port 2 of a one-port device"
    run_cli "${live_env[@]}" "$cli" reset
    expect 1 "$err" "in use by softverbs processes \(pids: $live_pid\)" \
      "reset refuses while a program is attached, naming it"
  fi
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
  # A killed program cannot clean up: reset removes what it left, unless
  # another softverbs process of this user attached in between and swept it
  # (tests run side by side); either way nothing of it is left.
  run_cli "${live_env[@]}" "$cli" reset
  expect 0 "$out" "^(removed /dev/shm/svclilive$$-[0-9]+-registry|nothing to remove)" \
    "reset removes the registry a killed program left"
  checks=$((checks + 1))
  ! ls /dev/shm/svclilive$$-* >/dev/null 2>&1 || fail "segments of the killed program remain after reset"
  run_cli "${live_env[@]}" "$cli" reset
  expect 0 "$out" '^nothing to remove' "reset with nothing left"
  rm -f /dev/shm/svclilive$$-*
fi

# --- env LD_PRELOAD=... after `softverbs run --` drops softverbs -----------
run_cli "$cli" run -- env LD_PRELOAD=/nonexistent/librspreload.so true
expect 0 "$err" "replaces the LD_PRELOAD that brings softverbs.*LD_PRELOAD=\"\\\$LD_PRELOAD:/nonexistent/librspreload.so\"" \
  "a note when env replaces the preload"
run_cli "$cli" run -- env FOO=1 true
checks=$((checks + 1))
[[ ! -s $err ]] || fail "a note where env sets no LD_PRELOAD: $(cat "$err")"

# --- runs that each have a prefix of their own, as CI jobs ------------------
# Programs killed with their device open leave their registry and mailbox;
# the next program of the user that opens a device, whatever its prefix,
# removes them.
if [[ -f $built_library ]] && command -v ibv_rc_pingpong >/dev/null; then
  # Seen right after its kill (the next run, or another test's process,
  # may sweep it at once): else the check below would prove nothing.
  seen=0
  for ((run = 0; run < 20; run++)); do
    (env SOFTVERBS_SHM_PREFIX="svclirun$$-$run" timeout -s KILL 0.3 "$cli" run -- \
      ibv_rc_pingpong -d softverbs0 -p $((20000 + RANDOM % 12000)) >/dev/null 2>&1 </dev/null)
    ls /dev/shm | grep -q "^svclirun$$-$run-" && seen=$((seen + 1))
  done 2>/dev/null  # bash's "Killed" notes
  checks=$((checks + 1))
  ((seen > 0)) || fail "none of the killed runs left segments: the check below proves nothing"
  run_cli SOFTVERBS_SHM_PREFIX="svclinext$$" "$cli" run -- ibv_devinfo
  expect 0 "$out" 'hca_id:.softverbs0' "the next program runs"
  checks=$((checks + 1))
  left=$(ls /dev/shm | grep -c "^svclirun$$-")
  ((left == 0)) || fail "$left segments of 20 killed runs outlived the next softverbs process"
  rm -f /dev/shm/svclirun$$-*
fi

# --- a registry no program can use ------------------------------------------
if [[ -f $built_library ]] && command -v ibv_devinfo >/dev/null; then
  broken_env=(SOFTVERBS_SHM_PREFIX="svclibroken$$")
  head -c 100 /dev/zero >"/dev/shm/svclibroken$$-$(id -u)-registry"
  chmod 600 "/dev/shm/svclibroken$$-$(id -u)-registry"
  run_cli "${broken_env[@]}" "$cli" run -- ibv_devinfo
  expect 1 "$err" "made by another softverbs version or is damaged; .*run 'softverbs reset'" \
    "a damaged registry says what to do"
  run_cli "${broken_env[@]}" "$cli" reset
  expect 0 "$out" "^removed /dev/shm/svclibroken$$-" "reset removes a damaged registry"
  run_cli "${broken_env[@]}" "$cli" run -- ibv_devinfo
  expect 0 "$out" 'hca_id:.softverbs0' "devices open again after reset"
  # A device's firmware version is the release that emulates it.
  version=$("$cli" --version | cut -d' ' -f2)
  expect 0 "$out" "fw_ver:[[:space:]]+${version//./\\.}\$" "ibv_devinfo's fw_ver is softverbs' version"
  run_cli "${broken_env[@]}" "$cli" reset --frob
  expect 2 "$err" "reset: unexpected argument '--frob'" "reset with a bad argument"
  rm -f /dev/shm/svclibroken$$-*
fi

echo "$checks checks, $failures failed"
[[ $failures -eq 0 ]]
