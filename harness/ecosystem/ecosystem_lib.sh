# Shared by the ecosystem tier's tests (label `ecosystem`): stacks users
# build on verbs (MPI, UCX, fio, rsocket, QEMU) run unmodified on soft
# devices. Sourced; the test sets `test_name` and passes the CLI as $1.
#
#   need_packages PKG...      installs what is missing (as root, apt-get);
#                             exits 77 saying why when it cannot
#   bounded SECONDS CMD...    CMD under timeout, killed 5 s after SIGTERM
#   start_bounded SECONDS CMD...  the same in the background; $! is the
#                             timeout's pid, so `kill $!` stops CMD (a
#                             function put in the background with & would
#                             leave it running in a subshell)
#   watch_traffic PROGRAM     samples `softverbs stats` while the test runs,
#                             for the processes named PROGRAM; a test whose
#                             programs run in a network namespace sets
#                             in_namespace=(COMMAND PREFIX) first, the one
#                             that runs its programs there (`softverbs topo
#                             exec N --`): the programs answer on abstract
#                             sockets, which are the namespace's
#   traffic_through_softverbs the frames those processes sent through the
#                             soft devices (0 if none was seen)
#   check_traffic [HINT]      checks that some did, keeping the count in
#                             $frames
#   wait_for_listener PORT    until a program of the run listens on PORT
#   fail MESSAGE / finish     count a failure / end with the checks' result
#   free_tcp_port             (scripts/lib/client-server.sh) a port to use
#
# Every test has a shared-memory prefix of its own, so `softverbs stats`
# sees only its own processes, and removes what that prefix left.

cli=${1:?usage: TEST PATH/TO/softverbs}
# free_tcp_port: a port below the ephemeral range that nobody listens on.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/client-server.sh"
cli=$(realpath "$cli")
export SOFTVERBS_SHM_PREFIX="sveco-${test_name:?}"
export SOFTVERBS_UDP=0
work=$(mktemp -d "/tmp/softverbs-${test_name}.XXXXXX")
failures=0
checks=0
sampler=
in_namespace=()

cleanup() {
  [[ -n $sampler ]] && kill "$sampler" 2>/dev/null
  "$cli" reset --force >/dev/null 2>&1
  [[ -n ${KEEP_WORK:-} ]] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
# Programs write their own files where they run (NetPIPE's np.out).
cd "$work" || exit 1

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { checks=$((checks + 1)); }

finish() {
  echo "$test_name: $checks checks, $failures failed"
  ((failures == 0))
  exit
}

skip() {
  echo "skipped: $*"
  exit 77
}

need_packages() {
  local missing=() package
  for package in "$@"; do
    [[ $(dpkg-query -W -f='${Status}' "$package" 2>/dev/null) == "install ok installed" ]] ||
      missing+=("$package")
  done
  ((${#missing[@]} == 0)) && return 0
  (($(id -u) == 0)) || skip "needs the packages ${missing[*]} (apt-get install ${missing[*]}, as root)"
  echo "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >"$work/apt.log" 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        >"$work/apt.log" 2>&1; } ||
    skip "could not install ${missing[*]}: $(tail -1 "$work/apt.log")"
}

bounded() {
  local seconds=$1
  shift
  timeout -k 5 "$seconds" "$@"
}

start_bounded() {
  local seconds=$1
  shift
  timeout -k 5 "$seconds" "$@" &
}

# The highest frames_sent of processes named PROGRAM, sampled every 0.2 s
# until the test ends (a process's counters go with it).
watch_traffic() {
  local program=$1
  watched_program=$program
  : >"$work/traffic"
  (
    while :; do
      "${in_namespace[@]}" "$cli" stats 2>/dev/null | awk -v program="$program" '
        /^process / { mine = ($3 == program) }
        mine && /^engine:/ { for (i = 2; i <= NF; i++) if ($i ~ /^frames_sent=/) { sub(/.*=/, "", $i); print $i } }
      ' >>"$work/traffic"
      sleep 0.2
    done
  ) &
  sampler=$!
}

traffic_through_softverbs() {
  sort -n "$work/traffic" 2>/dev/null | tail -1 | grep . || echo 0
}

check_traffic() {
  frames=$(traffic_through_softverbs)
  check
  ((frames > 0)) || fail "no frame of $watched_program went through the soft devices${1:+ ($1)}"
}

# Waits up to 10 s until a program of this run listens on PORT through
# librdmacm (`softverbs listeners`), rather than sleeping a guess.
wait_for_listener() {
  local port=$1 i
  for ((i = 0; i < 100; i++)); do
    "$cli" listeners 2>/dev/null | grep -q ":$port " && return 0
    sleep 0.1
  done
  return 1
}
