#!/usr/bin/env bash
# The bench: runs the whole comparison on this machine and writes a report
# (markdown tables and plots of latency and bandwidth against message size).
#   - perftest, unmodified, on softverbs0: ib_{send,write,read}_{lat,bw} for
#     every size, ib_atomic_{lat,bw}; and the one-sided rows of the targets
#     again with private MR pages (SOFTVERBS_SHARE_MR_PAGES=0, the opt-out);
#   - libfabric's fi_pingpong over its shm provider, same sizes;
#   - the machine's raw limits (bench_limits): a cache line hop between two
#     processes and how often the machine stalls it, a futex wake, a page's
#     first touch, memcpy,
#     CMA (process_vm_writev);
#   - T threads of one context against one thread (bench_threads), T event-
#     driven threads ping-ponging with another process (bench_thread_peers), the cost
#     of creating, connecting and idly holding many RC QPs (bench_qps);
#   - the Google Benchmark micro-benchmarks (softverbs_bench).
# Rounds are interleaved: each round runs every measurement once; a figure is
# the median of the rounds with the fastest and slowest round beside it, and
# each target ratio is taken inside one round. Progress goes to stderr.
# bench/README.md explains the report.
#
# Usage: bench/run-perftest.sh [BUILD_DIR] [OPTIONS]
#   BUILD_DIR       default build/ (made by scripts/build.sh)
#   --quick         sizes 8 B, 64 KiB, 1 MiB, one round, short runs (about 3 minutes)
#   --rounds N      rounds (default 3)
#   --sizes "..."   message sizes in bytes, 8 to 4194304
#                   (default "8 64 512 4096 16384 65536 262144 1048576 4194304")
#   --only REGEX    run only the measurements whose ID matches REGEX (grep -E),
#                   e.g. 'ib_write|cma'; --list shows the IDs
#   --list          print the measurement IDs and exit
#   --rebuild       measure nothing: rebuild the report (and docs, with
#                   --update-docs) from the samples.tsv in --out, left by an
#                   earlier run with the same options
#   --out DIR       where report.md, the plots, summary.tsv, samples.tsv and
#                   the logs go (default BUILD_DIR/bench/report)
#   --update-docs   also put the report into docs/performance.md and its plots
#                   and summary.tsv into docs/performance/
#   --baseline FILE summary.tsv of an earlier report, the anchor of the
#                   message rate row (default docs/performance/summary.tsv)
#   BENCH_TIMEOUT   seconds any one process may run (default 180)
#   BENCH_QPS       QPs for the scale and idle rows (default 65536)
#   BENCH_SHM_PREFIX  SOFTVERBS_SHM_PREFIX of every softverbs process (default svbench)
#   SOFTVERBS_BENCH_DEVICE  the soft device (default softverbs0)
# Exit status: 0 when every measurement ran (targets may still be missed),
# 1 when some failed (the report says why), 2 on misuse.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB="$ROOT/bench/lib"
source "$ROOT/scripts/lib/client-server.sh"
source "$LIB/measure.sh"
source "$LIB/report.sh"

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
misuse() {
  echo "run-perftest: $1 (try --help)" >&2
  exit 2
}

# The command as a reader would type it again.
COMMAND_LINE="bash bench/run-perftest.sh"
for argument in "$@"; do
  if [[ $argument =~ ^[A-Za-z0-9_./:=,+-]+$ ]]; then COMMAND_LINE+=" $argument"; else COMMAND_LINE+=" '$argument'"; fi
done
build_dir="$ROOT/build"
OUT=
QUICK=0
ROUNDS=
SIZES=
only=
list=0
rebuild=0
update_docs=0
BASELINE="$ROOT/docs/performance/summary.tsv"
while (($# > 0)); do
  case $1 in
    --quick) QUICK=1; shift ;;
    --rounds|--sizes|--only|--out|--baseline)
      (($# >= 2)) || misuse "$1 needs a value"
      case $1 in
        --rounds) ROUNDS=$2 ;;
        --sizes) SIZES=$2 ;;
        --only) only=$2 ;;
        --out) OUT=$(realpath -m "$2") ;;
        --baseline) BASELINE=$(realpath -m "$2") ;;
      esac
      shift 2 ;;
    --list) list=1; shift ;;
    --rebuild) rebuild=1; shift ;;
    --update-docs) update_docs=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) misuse "unknown option $1" ;;
    *) build_dir=$(realpath -m "$1"); shift ;;
  esac
done

if ((QUICK)); then
  ROUNDS=${ROUNDS:-1}
  SIZES=${SIZES:-"8 65536 1048576"}
  IDLE_SECONDS=3
  THREAD_SECONDS=1
  GBENCH_MIN_TIME=0.05
else
  ROUNDS=${ROUNDS:-3}
  SIZES=${SIZES:-"8 64 512 4096 16384 65536 262144 1048576 4194304"}
  IDLE_SECONDS=10
  THREAD_SECONDS=2
  GBENCH_MIN_TIME=0.2
fi
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || misuse "--rounds takes a positive number, not '$ROUNDS'"
for size in $SIZES; do
  [[ $size =~ ^[0-9]+$ ]] && ((size >= 8 && size <= 4194304)) ||
    misuse "--sizes takes sizes from 8 to 4194304 bytes, not '$size'"
done
# The target rows need these sizes whatever was asked for.
SIZES=$(printf '%s\n' $SIZES 8 65536 1048576 | sort -nu | paste -sd' ')
QP_COUNT=${BENCH_QPS:-65536}
[[ $QP_COUNT =~ ^[0-9]+$ ]] && ((QP_COUNT >= 2 && QP_COUNT % 2 == 0)) ||
  misuse "BENCH_QPS must be an even number of at least 2"
LIMIT=${BENCH_TIMEOUT:-180}
[[ $LIMIT =~ ^[1-9][0-9]*$ ]] || misuse "BENCH_TIMEOUT takes seconds, not '$LIMIT'"
DEVICE=${SOFTVERBS_BENCH_DEVICE:-softverbs0}
cores=$(nproc)
THREAD_COUNTS=$(seq 1 $((cores < 8 ? cores : 8)) | paste -sd' ')
# Event-driven threads sleep between messages: more of them than cores.
PEER_THREAD_COUNTS="1 2 4"

# The measurements of one round, in order. Sizes go one after another so
# that the figures a target compares (ib_write_bw and CMA of one size, say)
# are taken close together in time.
# private_* are the same perftest runs with SOFTVERBS_SHARE_MR_PAGES=0 (the
# one-sided operations by process_vm_writev/readv), beside the defaults;
# uc_* and ud_* on UC and UD QPs (SENDs without acknowledgement).
PLAN=()
for size in $SIZES; do
  PLAN+=("ib_send_lat:$size" "ib_write_lat:$size" "ib_read_lat:$size" "fi_pingpong:$size"
         "ib_send_bw:$size" "ib_write_bw:$size" "ib_read_bw:$size" "cma:$size" "memcpy:$size")
  case $size in
    8) PLAN+=("uc_ib_send_lat:8" "ud_ib_send_lat:8"
              "private_ib_write_lat:8" "private_ib_read_lat:8" "private_ib_write_bw:8") ;;
    65536 | 1048576) PLAN+=("private_ib_write_bw:$size") ;;
  esac
done
PLAN+=(ib_atomic_lat:8 ib_atomic_bw:8 private_ib_atomic_lat:8 private_ib_atomic_bw:8 hop stalls futex faults)
for t in $THREAD_COUNTS; do PLAN+=("threads:$t"); done
for t in $THREAD_COUNTS; do PLAN+=("threads_send:$t"); done
for t in $PEER_THREAD_COUNTS; do PLAN+=("thread_peers:$t"); done
PLAN+=(qps:2 "qps:$QP_COUNT" reg_mr:1073741824 private_reg_mr:1073741824 'gbench:^hot_')
((QUICK)) || PLAN+=('gbench:^rc_.*_pingpong' 'gbench:^rc_write_bandwidth')
if [[ -n $only ]]; then
  mapfile -t PLAN < <(printf '%s\n' "${PLAN[@]}" | grep -E -- "$only")
  ((${#PLAN[@]} > 0)) || misuse "--only '$only' matches no measurement (see --list)"
fi
if ((list)); then
  printf '%s\n' "${PLAN[@]}"
  exit 0
fi

CLI="$build_dir/harness/cli/softverbs"
BENCH_BIN="$build_dir/bench"
[[ -x $CLI ]] || { echo "run-perftest: $CLI is not built; run: bash scripts/build.sh" >&2; exit 2; }
for program in bench_limits bench_qps bench_threads bench_thread_peers softverbs_bench; do
  [[ -x $BENCH_BIN/$program ]] ||
    { echo "run-perftest: $BENCH_BIN/$program is not built (SOFTVERBS_BUILD_BENCH=OFF?); run: bash scripts/build.sh" >&2; exit 2; }
done
for tool in ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw \
            fi_pingpong timeout awk; do
  command -v $tool >/dev/null || { echo "run-perftest: $tool is missing; run: bash scripts/setup.sh" >&2; exit 2; }
done
if ((update_docs)) && ! grep -q '^<!-- bench report begin' "$ROOT/docs/performance.md" 2>/dev/null; then
  echo "run-perftest: --update-docs needs docs/performance.md with its '<!-- bench report begin' and 'end' markers" >&2
  exit 2
fi

clock() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

# Runs ROUNDS rounds of PLAN, showing progress on stderr; appends to SAMPLES.
measure_rounds() {
  rm -rf "$OUT/logs"
  PAIR_LOG_DIR="$OUT/logs"
  mkdir -p "$PAIR_LOG_DIR"
  export SOFTVERBS_SHM_PREFIX=${BENCH_SHM_PREFIX:-svbench}
  export SOFTVERBS_BENCH_DEVICE=$DEVICE
  # Every process is bounded by timeout; on an interrupt, stop the ones in
  # the background too.
  trap 'jobs -p | xargs -r kill 2>/dev/null' EXIT
  local started total done_count=0 elapsed left id
  started=$(date +%s)
  total=$((ROUNDS * ${#PLAN[@]}))
  ROUND=0
  record run command "$COMMAND_LINE"
  record run started "$started"
  record run rounds "$ROUNDS"
  # The commit measured, named when the run starts: a report rebuilt later
  # (--rebuild), or one written after a commit made during the run, still
  # names the code that ran.
  record run commit "$(measured_commit)"
  echo "run-perftest: $ROUNDS round(s) of ${#PLAN[@]} measurements; report in $OUT" >&2
  for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    record load loadavg1 "$(cut -d' ' -f1 /proc/loadavg)"
    for id in "${PLAN[@]}"; do
      elapsed=$(($(date +%s) - started))
      left=
      ((done_count > 0)) && left=", ~$(clock $((elapsed * (total - done_count) / done_count))) left"
      printf '[round %d/%d, %d/%d, %s%s] %s ... ' "$ROUND" "$ROUNDS" $((done_count + 1)) "$total" \
        "$(clock "$elapsed")" "$left" "$id" >&2
      measure "$id"
      echo "$NOTE" >&2
      done_count=$((done_count + 1))
    done
  done
  record load loadavg1 "$(cut -d' ' -f1 /proc/loadavg)"
  ROUND=0
  record run finished "$(date +%s)"
}

OUT=${OUT:-$build_dir/bench/report}
SAMPLES="$OUT/samples.tsv"
if ((rebuild)); then
  [[ -s $SAMPLES ]] || { echo "run-perftest: --rebuild found no $SAMPLES" >&2; exit 2; }
  [[ -r $OUT/baseline.tsv ]] && BASELINE="$OUT/baseline.tsv" || BASELINE=
else
  mkdir -p "$OUT"
  : >"$SAMPLES"
  # A baseline kept beside the new report would be overwritten by it.
  if [[ -r $BASELINE ]]; then
    cp "$BASELINE" "$OUT/baseline.tsv"
    BASELINE="$OUT/baseline.tsv"
  else
    rm -f "$OUT/baseline.tsv"
    BASELINE=
  fi
  measure_rounds
fi
# What the run was: kept in the samples so that --rebuild reports it too.
COMMAND_LINE=$(awk -F'\t' '$2 == "run" && $3 == "command" { print $4 }' "$SAMPLES")
STARTED=$(awk -F'\t' '$2 == "run" && $3 == "started" { print $4 }' "$SAMPLES")
FINISHED=$(awk -F'\t' '$2 == "run" && $3 == "finished" { print $4 }' "$SAMPLES")
ROUNDS=$(awk -F'\t' '$2 == "run" && $3 == "rounds" { print $4 }' "$SAMPLES")
MEASURED_COMMIT=$(awk -F'\t' '$2 == "run" && $3 == "commit" { print $4 }' "$SAMPLES")

load_results
write_plots
{
  echo "# softverbs bench report"
  echo
  report_body "##" ""
} >"$OUT/report.md"

if ((update_docs)); then
  docs="$ROOT/docs/performance.md"
  mkdir -p "$ROOT/docs/performance"
  cp "$OUT/summary.tsv" "$ROOT/docs/performance/summary.tsv"
  for plot in latency.png bandwidth.png; do
    [[ -f $OUT/$plot ]] && cp "$OUT/$plot" "$ROOT/docs/performance/$plot"
  done
  report_body "###" "performance/" >"$OUT/docs-section.md"
  # Everything between the markers is replaced; the rest of the page stays.
  awk -v section="$OUT/docs-section.md" '
    /^<!-- bench report begin/ { print; while ((getline line < section) > 0) print line; skipping = 1; next }
    /^<!-- bench report end/ { skipping = 0 }
    !skipping' "$docs" >"$docs.new" && mv "$docs.new" "$docs"
  echo "run-perftest: updated $docs and docs/performance/" >&2
fi

failed=$(grep -c $'\terror\t' "$SAMPLES")
echo "run-perftest: report in $OUT/report.md ($failed failed measurement(s), $(clock $((FINISHED - STARTED))))" >&2
((failed == 0)) || exit 1
