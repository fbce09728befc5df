# shellcheck shell=bash
# Turns the bench's samples into its report (sourced by bench/run-perftest.sh):
# summary.tsv (one line per figure: median, min, max over the rounds), the
# markdown body, and the two plots. Every figure is the median of the rounds
# with the fastest and slowest round in brackets; every ratio is taken inside
# one round (measured side by side) and then reduced the same way.
#
# Needs: LIB (this folder), SAMPLES, OUT, ROUNDS, SIZES, THREAD_COUNTS, PEER_THREAD_COUNTS,
# QP_COUNT, PLAN (the measurement IDs), BASELINE (a summary.tsv or empty).

declare -A S_TEXT=() S_MED=() ERR_COUNT=() ERR_WHY=() VAL=() PLANNED=()

load_results() {
  awk -f "$LIB/aggregate.awk" "$SAMPLES" | sort >"$OUT/summary.tsv"
  local id metric n median text round value
  while IFS=$'\t' read -r id metric n median _ _ text; do
    if [[ $metric == error ]]; then
      ERR_COUNT[$id]=$n
      ERR_WHY[$id]=$median
    else
      S_TEXT[$id|$metric]=$text
      S_MED[$id|$metric]=$median
    fi
  done <"$OUT/summary.tsv"
  while IFS=$'\t' read -r round id metric value; do
    [[ $metric == error ]] || VAL[$round|$id|$metric]=$value
  done <"$SAMPLES"
  for id in "${PLAN[@]}"; do PLANNED[$id]=1; done
}

# cell ID METRIC [UNIT]: "median [min–max] UNIT" for a table, or why not.
cell() {
  local key="$1|$2" unit=${3:+ $3}
  if [[ -n ${S_TEXT[$key]:-} ]]; then
    local text="${S_TEXT[$key]}$unit"
    [[ -n ${ERR_COUNT[$1]:-} ]] && text+=" (failed in ${ERR_COUNT[$1]} of $ROUNDS rounds)"
    echo "$text"
  elif [[ -n ${ERR_COUNT[$1]:-} ]]; then
    echo "failed"
  elif [[ -n ${PLANNED[$1]:-} ]]; then
    echo "no figure"
  else
    echo "not run"
  fi
}

# ratio_stats NUM_ID|METRIC DEN_ID|METRIC: the ratio in every round where both
# were measured, reduced like any figure: "median<TAB>text", or nothing.
ratio_stats() {
  local r rows=
  for ((r = 1; r <= ROUNDS; r++)); do
    local a=${VAL[$r|$1]:-} b=${VAL[$r|$2]:-}
    [[ -n $a && -n $b ]] && rows+="$r"$'\tratio\tx\t'"$a"$'\t'"$b"$'\n'
  done
  [[ -n $rows ]] || return 0
  awk -F'\t' -v OFS='\t' '$5 != 0 { print $1, $2, $3, $4 / $5 }' <<<"$rows" |
    awk -f "$LIB/aggregate.awk" | awk -F'\t' -v OFS='\t' '$2 == "x" { print $4, $7 }'
}

# What a row without a figure says: MISS when it was meant to be measured.
unmeasured() {
  local id
  for id in "$@"; do [[ -n ${PLANNED[$id]:-} ]] || { echo "not run"; return; }; done
  echo "MISS (not measured)"
}

# verdict VALUE OP GOAL: PASS or MISS (OP is le, lt or ge).
verdict() {
  awk -v v="$1" -v op="$2" -v goal="$3" 'BEGIN {
    ok = op == "le" ? v <= goal : op == "lt" ? v < goal : v >= goal
    print ok ? "PASS" : "MISS" }'
}

goal_text() {
  case $1 in le) echo "≤ $2" ;; lt) echo "< $2" ;; ge) echo "≥ $2" ;; esac
}

# A target row measured against an anchor of the same run.
ratio_row() {
  local label=$1 num=$2 den=$3 op=$4 goal=$5 unit=$6 stats ratio text result
  stats=$(ratio_stats "$num" "$den")
  if [[ -n $stats ]]; then
    IFS=$'\t' read -r ratio text <<<"$stats"
    result=$(verdict "$ratio" "$op" "$goal")
    text+="x"
  else
    text="–"
    result=$(unmeasured "${num%|*}" "${den%|*}")
  fi
  echo "| $label | $(cell "${num%|*}" "${num#*|}" "$unit") | $(cell "${den%|*}" "${den#*|}" "$unit") | $text | $(goal_text "$op" "$goal")x | $result |"
}

# A target row with an absolute goal.
absolute_row() {
  local label=$1 key=$2 op=$3 goal=$4 unit=$5 result
  if [[ -n ${S_MED[$key]:-} ]]; then
    result=$(verdict "${S_MED[$key]}" "$op" "$goal")
  else
    result=$(unmeasured "${key%|*}")
  fi
  echo "| $label | $(cell "${key%|*}" "${key#*|}" "$unit") | – | – | $(goal_text "$op" "$goal") $unit | $result |"
}

# The message rate row: its anchor is the same figure in an earlier report.
message_rate_row() {
  local key="ib_write_bw:8|mpps" previous="" shown="" ratio result anchor
  if [[ -n $BASELINE && -r $BASELINE ]]; then
    previous=$(awk -F'\t' '$1 == "ib_write_bw:8" && $2 == "mpps" { print $4 }' "$BASELINE")
    # The median as the previous report showed it (its text without the spread).
    shown=$(awk -F'\t' '$1 == "ib_write_bw:8" && $2 == "mpps" { sub(/ \[.*/, "", $7); print $7 }' "$BASELINE")
  fi
  if [[ -z ${S_MED[$key]:-} ]]; then
    anchor=${previous:+$shown Mmsg/s (previous report)}
    echo "| ib_write_bw -s 8 message rate | $(cell ib_write_bw:8 mpps Mmsg/s) | ${anchor:-–} | – | ≥ 1.0x previous | $(unmeasured ib_write_bw:8) |"
  elif [[ -z $previous ]]; then
    echo "| ib_write_bw -s 8 message rate | $(cell ib_write_bw:8 mpps Mmsg/s) | no previous report | – | ≥ 1.0x previous | first report: this is the baseline |"
  else
    ratio=$(awk -v a="${S_MED[$key]}" -v b="$previous" 'BEGIN { printf "%.2f", a / b }')
    result=$(verdict "$ratio" ge 1.0)
    echo "| ib_write_bw -s 8 message rate | $(cell ib_write_bw:8 mpps Mmsg/s) | $shown Mmsg/s (previous report) | ${ratio}x | ≥ 1.0x previous | $result |"
  fi
}

# What the QP scale program managed to create, when it fell short.
created_note() {
  local created=${S_MED[qps:$1|created]:-}
  [[ -n $created && ${created%.*} -lt $1 ]] && echo " (only ${created%.*} fit)"
}

targets_table() {
  echo "| target | measured | anchor (same run) | ratio | goal | result |"
  echo "|---|---:|---:|---:|---:|---|"
  ratio_row "ib_send_lat -s 8, one-way, vs fi_pingpong shm 8 B one-way" "ib_send_lat:8|typical_us" "fi_pingpong:8|one_way_us" le 1.0 us
  ratio_row "ib_send_lat -s 8: 99th percentile vs median" "ib_send_lat:8|p99_us" "ib_send_lat:8|typical_us" le 3 us
  ratio_row "ib_send_bw -s 4096 vs fi_pingpong shm 4 KiB bandwidth" "ib_send_bw:4096|gbps" "fi_pingpong:4096|gbps" ge 1.0 GB/s
  ratio_row "ib_write_lat -s 8 vs ib_send_lat -s 8" "ib_write_lat:8|typical_us" "ib_send_lat:8|typical_us" le 0.5 us
  ratio_row "ib_read_lat -s 8 vs ib_send_lat -s 8" "ib_read_lat:8|typical_us" "ib_send_lat:8|typical_us" le 0.5 us
  ratio_row "ib_atomic_lat (fetch and add) vs ib_send_lat -s 8" "ib_atomic_lat:8|typical_us" "ib_send_lat:8|typical_us" le 0.7 us
  ratio_row "ib_write_lat -s 8: 99th percentile vs median" "ib_write_lat:8|p99_us" "ib_write_lat:8|typical_us" le 5 us
  ratio_row "ib_write_bw -s 1048576 vs CMA (process_vm_writev) 1 MiB" "ib_write_bw:1048576|gbps" "cma:1048576|gbps" ge 1.3 GB/s
  ratio_row "ib_write_bw -s 65536 vs CMA 64 KiB" "ib_write_bw:65536|gbps" "cma:65536|gbps" ge 1.3 GB/s
  message_rate_row
  local most=${THREAD_COUNTS##* }
  if ((most > 1)); then
    ratio_row "$most threads of one context, own QPs and CQs, vs $most x one thread (WRITEs/s per thread)" \
      "threads:$most|per_thread" "threads:1|rate" ge 0.85 msg/s
    ratio_row "$most threads of one context, own QPs and CQs, vs $most x one thread (SENDs/s per thread)" \
      "threads_send:$most|per_thread" "threads_send:1|rate" ge 0.85 msg/s
  else
    echo "| threads of one context vs one thread | one core only | – | – | ≥ 0.85x | not run |"
  fi
  # As many threads as cores: a thread woken for every completion spends
  # most of a core in the kernel on its own (futex waits and wake-ups), so
  # more threads than cores share them (the table has the figures).
  local peers=1 t
  for t in $PEER_THREAD_COUNTS; do ((t <= $(nproc))) && peers=$t; done
  ratio_row "$peers threads, own QPs, CQs and channels, ping-ponging with another process's, vs $peers x one thread (round trips/s per thread)" \
    "thread_peers:$peers|per_thread" "thread_peers:1|rate" ge 0.85 rt/s
  ratio_row "ibv_reg_mr of 1 GiB vs the same with private MR pages (SOFTVERBS_SHARE_MR_PAGES=0)" \
    "reg_mr:1073741824|reg_us" "private_reg_mr:1073741824|reg_us" le 1.5 us
  absolute_row "CPU of an idle process holding 2 connected RC QPs" "qps:2|idle_cpu_pct" lt 0.2 "% of a core"
  absolute_row "CPU of an idle process holding $QP_COUNT connected RC QPs$(created_note "$QP_COUNT")" \
    "qps:$QP_COUNT|idle_cpu_pct" lt 0.2 "% of a core"
  absolute_row "create + connect $QP_COUNT RC QPs in one process: time$(created_note "$QP_COUNT")" "qps:$QP_COUNT|seconds" lt 2 s
  absolute_row "create + connect $QP_COUNT RC QPs in one process: RSS" "qps:$QP_COUNT|rss_mib" lt 512 MiB
}

size_label() {
  local size=$1
  if ((size >= 1048576 && size % 1048576 == 0)); then echo "$((size / 1048576)) MiB"
  elif ((size >= 1024 && size % 1024 == 0)); then echo "$((size / 1024)) KiB"
  else echo "$size B"; fi
}

latency_table() {
  echo "| size | ib_send_lat | ib_write_lat | ib_read_lat | fi_pingpong shm | ib_write_lat 99% |"
  echo "|---:|---:|---:|---:|---:|---:|"
  local size
  for size in $SIZES; do
    echo "| $(size_label "$size") | $(cell "ib_send_lat:$size" typical_us) | $(cell "ib_write_lat:$size" typical_us) |" \
      "$(cell "ib_read_lat:$size" typical_us) | $(cell "fi_pingpong:$size" one_way_us) | $(cell "ib_write_lat:$size" p99_us) |"
  done
}

bandwidth_table() {
  echo "| size | ib_send_bw | ib_write_bw | ib_read_bw | fi_pingpong shm | CMA | memcpy |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  local size
  for size in $SIZES; do
    echo "| $(size_label "$size") | $(cell "ib_send_bw:$size" gbps) | $(cell "ib_write_bw:$size" gbps) |" \
      "$(cell "ib_read_bw:$size" gbps) | $(cell "fi_pingpong:$size" gbps) | $(cell "cma:$size" gbps) | $(cell "memcpy:$size" gbps) |"
  done
}

small_message_table() {
  echo "| measurement | figure |"
  echo "|---|---:|"
  echo "| ib_send_lat -c UC -s 8 (no acknowledgement), one-way median | $(cell uc_ib_send_lat:8 typical_us us) |"
  echo "| ib_send_lat -c UC -s 8, 99th percentile | $(cell uc_ib_send_lat:8 p99_us us) |"
  echo "| ib_send_lat -c UD -s 8, one-way median | $(cell ud_ib_send_lat:8 typical_us us) |"
  echo "| ib_send_lat -c UD -s 8, 99th percentile | $(cell ud_ib_send_lat:8 p99_us us) |"
  echo "| ib_send_bw -s 8 | $(cell ib_send_bw:8 mpps Mmsg/s) |"
  echo "| ib_write_bw -s 8 | $(cell ib_write_bw:8 mpps Mmsg/s) |"
  echo "| ib_write_bw -s 8 with private MR pages (SOFTVERBS_SHARE_MR_PAGES=0) | $(cell private_ib_write_bw:8 mpps Mmsg/s) |"
  echo "| ib_write_lat -s 8 with private MR pages, one-way median | $(cell private_ib_write_lat:8 typical_us us) |"
  echo "| ib_read_lat -s 8 with private MR pages, one-way median | $(cell private_ib_read_lat:8 typical_us us) |"
  echo "| ib_write_bw -s 65536 with private MR pages | $(cell private_ib_write_bw:65536 gbps GB/s) |"
  echo "| ib_write_bw -s 1048576 with private MR pages | $(cell private_ib_write_bw:1048576 gbps GB/s) |"
  echo "| ib_read_bw -s 8 | $(cell ib_read_bw:8 mpps Mmsg/s) |"
  echo "| ib_atomic_bw (fetch and add, 8 B) | $(cell ib_atomic_bw:8 mpps Mmsg/s) |"
  echo "| ib_atomic_lat (fetch and add), one-way median | $(cell ib_atomic_lat:8 typical_us us) |"
  echo "| ib_atomic_lat, 99th percentile | $(cell ib_atomic_lat:8 p99_us us) |"
  echo "| ib_atomic_bw with private MR pages (atomics as packets) | $(cell private_ib_atomic_bw:8 mpps Mmsg/s) |"
  echo "| ib_atomic_lat with private MR pages, one-way median | $(cell private_ib_atomic_lat:8 typical_us us) |"
}

limits_table() {
  echo "| limit | figure |"
  echo "|---|---:|"
  echo "| a cache line bouncing between two busy-polling processes, one-way | $(cell hop one_way_ns ns) |"
  echo "| the same hop timed one round trip at a time: 99th percentile, one-way | $(cell stalls p99_ns ns) |"
  echo "| the same: 99.9th percentile, one-way | $(cell stalls p999_ns ns) |"
  echo "| round trips of that hop stalled by the machine (above 1 µs) | $(cell stalls stalled_pct %) |"
  echo "| time between two such stalls, on average | $(cell stalls stall_every_us us) |"
  echo "| the same hop when the receiver sleeps in FUTEX_WAIT (a doorbell), one-way | $(cell futex one_way_us us) |"
  echo "| the first touch of a fresh page (a minor fault) | $(cell faults fault_ns ns) |"
  echo "| one process_vm_writev call of 8 B | $(cell cma:8 call_us us) |"
  echo "| process_vm_writev 1 MiB | $(cell cma:1048576 gbps GB/s) |"
  echo "| memcpy 1 MiB | $(cell memcpy:1048576 gbps GB/s) |"
}

# What the machine's stalls do to a ping-pong's tail: a round trip of R µs
# meets one about every (time between stalls / R) round trips. perftest's
# latency tools add their own: each side writes a timestamp per iteration
# into an array it never touched before, a page fault every 512 iterations.
stalls_note() {
  local every=${S_MED[stalls|stall_every_us]:-} one_way=${S_MED[ib_send_lat:8|typical_us]:-}
  local fault=${S_MED[faults|fault_ns]:-}
  [[ -n $every && -n $one_way ]] || return 0
  echo
  awk -v every="$every" -v one_way="$one_way" -v fault="$fault" 'BEGIN {
    n = every / (2 * one_way)
    printf "A round trip of ib_send_lat -s 8 (%.2g us) meets a stall of the machine about every %.0f round trips", 2 * one_way, n
    if (n < 100) printf ": more often than one in a hundred, so its 99th percentile measures the machine, not the transport"
    printf "."
    if (fault != "") {
      printf " perftest itself touches a fresh page of its timestamp arrays every 512 iterations on each side, a fault of %.2g us here: about one round trip in 256", fault / 1000
      printf "; with the stalls, one in %.0f (the 99th percentile holds while that is above 100).", 1 / (1 / n + 1 / 256)
    }
    print "" }'
}

threads_table() {
  echo "| operation | threads | messages/s, all threads | per thread | per thread vs one thread alone |"
  echo "|---|---:|---:|---:|---:|"
  local t stats ratio text kind label
  for kind in threads threads_send; do
    label=WRITE
    [[ $kind == threads_send ]] && label=SEND
    for t in $THREAD_COUNTS; do
      stats=$(ratio_stats "$kind:$t|per_thread" "$kind:1|rate")
      text=–
      [[ -n $stats ]] && IFS=$'\t' read -r ratio text <<<"$stats" && text+="x"
      echo "| $label | $t | $(cell "$kind:$t" rate) | $(cell "$kind:$t" per_thread) | $text |"
    done
  done
  for t in $PEER_THREAD_COUNTS; do
    stats=$(ratio_stats "thread_peers:$t|per_thread" "thread_peers:1|rate")
    text=–
    [[ -n $stats ]] && IFS=$'\t' read -r ratio text <<<"$stats" && text+="x"
    echo "| SEND ping-pong with another process, events | $t | $(cell "thread_peers:$t" rate) | $(cell "thread_peers:$t" per_thread) | $text |"
  done
}

qps_table() {
  echo "| QPs asked for | created | create | connect | create + connect | RSS | idle CPU (ticks) | idle CPU (run time) | idle wake-ups | destroy |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  local n
  for n in 2 "$QP_COUNT"; do
    echo "| $n | $(cell "qps:$n" created) | $(cell "qps:$n" create_seconds s) | $(cell "qps:$n" connect_seconds s) |" \
      "$(cell "qps:$n" seconds s) | $(cell "qps:$n" rss_mib MiB) | $(cell "qps:$n" idle_cpu_pct %) |" \
      "$(cell "qps:$n" idle_runtime_pct %) | $(cell "qps:$n" idle_wakeups_per_s /s) | $(cell "qps:$n" destroy_seconds s) |"
  done
}

gbench_table() {
  local names
  names=$(cut -f1 "$OUT/summary.tsv" | grep "^gbench:" | sort -uV)
  if [[ -z $names ]]; then
    echo "(not run)"
    return
  fi
  echo "| benchmark | wall time per iteration | throughput | one-way latency |"
  echo "|---|---:|---:|---:|"
  local id gbps one_way
  while read -r id; do
    [[ -n ${S_TEXT[$id|ns]:-} || -n ${ERR_COUNT[$id]:-} ]] || continue
    gbps=; one_way=
    [[ -n ${S_TEXT[$id|gbps]:-} ]] && gbps="${S_TEXT[$id|gbps]} GB/s"
    [[ -n ${S_TEXT[$id|one_way_us]:-} ]] && one_way="${S_TEXT[$id|one_way_us]} us"
    local name=${id#gbench:}
    echo "| ${name%/real_time} | $(cell "$id" ns ns) | $gbps | $one_way |"
  done <<<"$names"
}

failures_list() {
  local id any=0
  for id in $(printf '%s\n' "${!ERR_COUNT[@]}" | sort); do
    echo "- \`$id\` failed in ${ERR_COUNT[$id]} of $ROUNDS rounds: ${ERR_WHY[$id]}"
    any=1
  done
  ((any)) || echo "None: every measurement ran in every round."
}

# The commit of the tree being measured, and whether it had changes of its
# own (the report's files are what --update-docs rewrites: not a change).
measured_commit() {
  local commit
  commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD -- . ':!docs/performance.md' ':!docs/performance' 2>/dev/null ||
    commit+=" (with uncommitted changes)"
  echo "$commit"
}

# Machine and run facts, one list item each.
facts_list() {
  # Samples from before the commit was recorded name none: say so.
  local commit=${MEASURED_COMMIT:-"$(measured_commit), when the report was written"}
  local loads
  loads=$(awk -F'\t' '$2 == "load" { print $4 }' "$SAMPLES" | sort -n | sed -n '1p;$p' | paste -sd- | sed 's/-/ – /')
  echo "- command: \`$COMMAND_LINE\`"
  echo "- date: $(date -u -d "@$STARTED" '+%Y-%m-%d %H:%M UTC'), $(((FINISHED - STARTED) / 60)) min $(((FINISHED - STARTED) % 60)) s"
  echo "- commit: $commit"
  echo "- machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores," \
    "$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) memory;" \
    "$(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r)"
  echo "- load average (1 min) at the round boundaries, lowest – highest: $loads"
  if [[ -n ${S_TEXT[hop|one_way_ns]:-} ]]; then
    echo "- how quiet the machine was: a cache line hop took ${S_TEXT[hop|one_way_ns]} ns one-way (a hop far" \
      "above a few hundred ns means other work was competing for the cores, and every latency here grew with it)"
  fi
  echo "- perftest $(dpkg-query -W -f='${Version}' perftest 2>/dev/null || echo '?')," \
    "libfabric $(dpkg-query -W -f='${Version}' libfabric-bin 2>/dev/null || echo '?')"
  echo "- $ROUNDS round(s); every round runs every measurement once, in the same order; a figure is the" \
    "median of the rounds, [fastest–slowest round] in brackets"
}

# report_body HEADING PLOT_PREFIX: the report's markdown, section headings
# at level HEADING (## or ###), plots referred to as PLOT_PREFIX*.png.
report_body() {
  local h=$1 plots=$2
  facts_list
  echo
  echo "$h Targets"
  echo
  echo "Each ratio is taken within one round and then reduced over the rounds."
  echo
  targets_table
  echo
  echo "$h Latency against message size"
  echo
  echo "One-way µs: perftest's t_typical (its median, half a round trip) on softverbs0;"
  echo "fi_pingpong's usec/xfer (a mean, half a round trip) over libfabric's shm provider."
  echo
  [[ -f $OUT/latency.png ]] && echo "![one-way latency against message size](${plots}latency.png)" && echo
  latency_table
  echo
  echo "$h Bandwidth against message size"
  echo
  echo "GB/s (10^9 bytes/s). perftest's BW average; fi_pingpong's MB/sec (a ping-pong, one message"
  echo "in flight); CMA is one process_vm_writev into another process; memcpy within one process."
  echo
  [[ -f $OUT/bandwidth.png ]] && echo "![bandwidth against message size](${plots}bandwidth.png)" && echo
  bandwidth_table
  echo
  echo "$h Small messages and atomics"
  echo
  small_message_table
  echo
  echo "$h Raw limits of this machine"
  echo
  limits_table
  stalls_note
  echo
  echo "$h Threads of one context"
  echo
  echo "bench_threads: each thread streams 8 B RDMA WRITEs (SENDs, with the receives taken and posted"
  echo "again by the same thread) on its own loopback pair of RC QPs with its own CQs and memory region,"
  echo "32 in flight, for ${THREAD_SECONDS} s. bench_thread_peers: each thread ping-pongs 8 B SENDs with"
  echo "a thread of a second (forked) process, own QP, CQ and completion channel on both sides, and"
  echo "blocks in ibv_get_cq_event for every completion (as rsocket does); the figures are round trips."
  echo "Each kind has a target row, with as many threads as cores: one thread woken for every"
  echo "completion already spends most of a core in the kernel (futex waits and wake-ups), so more"
  echo "threads than cores share the cores."
  echo
  threads_table
  echo
  echo "$h QPs: creating them, holding them idle"
  echo
  echo "bench_qps: RC QPs in loopback pairs in one process (send and receive queues of one WR);"
  echo "idle CPU is utime + stime from /proc/PID/stat over ${IDLE_SECONDS} s while the process sleeps"
  echo "(resolution: one clock tick, $(awk -v hz="$(getconf CLK_TCK)" -v s="$IDLE_SECONDS" 'BEGIN { printf "%.2g", 100 / hz / s }')% of a core); the target rows use that figure."
  echo "Run time (the threads' schedstat, in ns) and wake-ups (context switches of all its threads) are"
  echo "taken over the same window."
  echo
  qps_table
  echo
  echo "$h Micro-benchmarks (softverbs_bench, Google Benchmark)"
  echo
  gbench_table
  echo
  echo "$h Failures"
  echo
  failures_list
}

# Columns median, min, max of ID|METRIC for every size, NaN where missing.
plot_data() {
  local size series key
  for size in $SIZES; do
    printf '%s' "$size"
    for series in "$@"; do
      key="${series%|*}:$size|${series#*|}"
      if [[ -n ${S_MED[$key]:-} ]]; then
        awk -F'\t' -v id="${key%|*}" -v m="${key#*|}" '$1 == id && $2 == m { printf " %s %s %s", $4, $5, $6 }' "$OUT/summary.tsv"
      else
        printf ' NaN NaN NaN'
      fi
    done
    echo
  done
}

# gnuplot_png NAME TITLE YLABEL PLOT: NAME.png from NAME.dat, unless the
# data holds no figure at all.
gnuplot_png() {
  local name=$1 title=$2 ylabel=$3 plot=$4 tics="" size
  rm -f "$OUT/$name.png"
  awk '{ for (i = 2; i <= NF; i++) if ($i != "NaN") found = 1 } END { exit !found }' "$OUT/$name.dat" || return 0
  for size in $SIZES; do tics+="\"$(size_label "$size" | tr -d ' ')\" $size,"; done
  (cd "$OUT" && gnuplot 2>>"$OUT/gnuplot.log" <<EOF) || echo "run-perftest: gnuplot failed, see $OUT/gnuplot.log" >&2
set terminal pngcairo size 960,600 noenhanced font ',10'
set output '$name.png'
set datafile missing 'NaN'
set logscale xy
set format y '%g'
set offsets graph 0.05, graph 0.05, 0, 0
set xtics (${tics%,})
set grid
set key top left
set bars small
set xlabel 'message size'
set title '$title'
set ylabel '$ylabel'
plot $plot
EOF
}

write_plots() {
  rm -f "$OUT/gnuplot.log"
  command -v gnuplot >/dev/null || { echo "run-perftest: gnuplot is missing (package gnuplot-nox): no plots" >&2; return; }
  plot_data "ib_send_lat|typical_us" "ib_write_lat|typical_us" "ib_read_lat|typical_us" "fi_pingpong|one_way_us" \
    >"$OUT/latency.dat"
  plot_data "ib_send_bw|gbps" "ib_write_bw|gbps" "ib_read_bw|gbps" "fi_pingpong|gbps" "cma|gbps" "memcpy|gbps" \
    >"$OUT/bandwidth.dat"
  local hop_line=
  # The cache line hop is the floor of any latency here; drawn when measured.
  [[ -n ${S_MED[hop|one_way_ns]:-} ]] &&
    hop_line=", ${S_MED[hop|one_way_ns]} / 1000.0 with lines lc rgb 'gray40' dt 3 title 'cache line hop (floor)'"
  gnuplot_png latency \
    'one-way latency, softverbs0 (perftest) and libfabric shm; median of the rounds, bars: fastest-slowest' \
    microseconds \
    "'latency.dat' using 1:2:3:4 with yerrorlines lw 2 title 'ib_send_lat', \\
     '' using 1:5:6:7 with yerrorlines lw 2 title 'ib_write_lat', \\
     '' using 1:8:9:10 with yerrorlines lw 2 title 'ib_read_lat', \\
     '' using 1:11:12:13 with yerrorlines lw 2 dt 2 title 'fi_pingpong shm'$hop_line"
  gnuplot_png bandwidth \
    'bandwidth, softverbs0 (perftest), libfabric shm and the machine; median of the rounds, bars: fastest-slowest' \
    'GB/s (10^9 bytes/s)' \
    "'bandwidth.dat' using 1:2:3:4 with yerrorlines lw 2 title 'ib_send_bw', \\
     '' using 1:5:6:7 with yerrorlines lw 2 title 'ib_write_bw', \\
     '' using 1:8:9:10 with yerrorlines lw 2 title 'ib_read_bw', \\
     '' using 1:11:12:13 with yerrorlines lw 2 dt 2 title 'fi_pingpong shm', \\
     '' using 1:14:15:16 with yerrorlines lw 2 dt 4 lc rgb 'black' title 'CMA process_vm_writev', \\
     '' using 1:17:18:19 with yerrorlines lw 1 dt 3 lc rgb 'gray40' title 'memcpy'"
}
