# shellcheck shell=bash
# One function per kind of measurement of the bench (sourced by
# bench/run-perftest.sh). `measure ID` runs the measurement named ID once and
# appends what it saw to $SAMPLES, one line per figure:
#   ROUND <tab> ID <tab> METRIC <tab> VALUE
# or, when it could not measure, one line
#   ROUND <tab> ID <tab> error <tab> WHY
# and leaves a short human-readable result in $NOTE for the progress line.
#
# IDs: TOOL:SIZE for perftest (ib_send_lat:8, ib_write_bw:65536 ...;
# private_TOOL:SIZE with SOFTVERBS_SHARE_MR_PAGES=0, uc_TOOL:SIZE and
# ud_TOOL:SIZE on UC and UD QPs),
# fi_pingpong:SIZE, cma:SIZE, memcpy:SIZE, hop, stalls, futex, faults, threads:T,
# threads_send:T, thread_peers:T, qps:N, reg_mr:BYTES (private_reg_mr:BYTES)
# and gbench:FILTER (a family of softverbs_bench).
#
# Needs: CLI, BENCH_BIN (the build's bench/ folder), DEVICE, ROUND, SAMPLES,
# LIMIT (seconds per process), QUICK (0/1), IDLE_SECONDS, THREAD_SECONDS,
# PAIR_LOG_DIR; scripts/lib/client-server.sh sourced.

record() { printf '%s\t%s\t%s\t%s\n' "$ROUND" "$1" "$2" "$3" >>"$SAMPLES"; }

record_failure() {
  local why=${2//$'\t'/ }
  why=${why//$'\n'/ }
  printf '%s\t%s\terror\t%s\n' "$ROUND" "$1" "${why:0:200}" >>"$SAMPLES"
  NOTE="failed: ${why:0:100}"
}

# value_of KEY FILE: the value of KEY= in the last line of FILE that has it.
value_of() {
  awk -v key="$1" '{ for (i = 1; i <= NF; i++) if (index($i, key "=") == 1) value = substr($i, length(key) + 2) }
                   END { print value }' "$2"
}

# Iterations for a ping-pong of SIZE bytes: many for small messages, about
# 256 MiB each way for large ones (a quarter of that in quick mode).
latency_iterations() {
  local size=$1 most=10000 least=100 budget=$((256 << 20))
  ((QUICK)) && most=1000 least=50 budget=$((64 << 20))
  local n=$((budget / size))
  ((n > most)) && n=$most
  ((n < least)) && n=$least
  echo $n
}

# Iterations for a bandwidth run of TOOL: about 1 GiB, at most 100,000
# messages, and at least the tool's own default (ib_write_bw 5,000, the
# others 1,000): what the tool typed with no -n measures. 1,024 WRITEs of
# 1 MiB to a fresh peer gave 23-29 GB/s where 5,000 gave 38-39: the first
# GiB runs at about half speed, and CMA, the row's anchor, is measured in
# its steady state.
bandwidth_iterations() {
  local size=$1 tool=$2 most=100000 least=1000 budget=$((1 << 30))
  [[ $tool == ib_write_bw ]] && least=5000
  ((QUICK)) && most=20000 least=100 budget=$((256 << 20))
  local n=$((budget / size))
  ((n > most)) && n=$most
  ((n < least)) && n=$least
  echo $n
}

# The last result row perftest prints: size and iteration count first, both
# plain numbers.
perftest_row() {
  awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 5 { row = $0 } END { print row }' "$1"
}

# ibv_wc_status values by number, for perftest's "Failed status N".
WC_STATUS=(SUCCESS LOC_LEN_ERR LOC_QP_OP_ERR LOC_EEC_OP_ERR LOC_PROT_ERR WR_FLUSH_ERR MW_BIND_ERR
  BAD_RESP_ERR LOC_ACCESS_ERR REM_INV_REQ_ERR REM_ACCESS_ERR REM_OP_ERR RETRY_EXC_ERR
  RNR_RETRY_EXC_ERR LOC_RDD_VIOL_ERR REM_INV_RD_REQ_ERR REM_ABORT_ERR INV_EECN_ERR
  INV_EEC_STATE_ERR FATAL_ERR RESP_TIMEOUT_ERR GENERAL_ERR)

# Why a client/server pair failed, in one line: the exit statuses and the
# first two error lines of the client's log (else the server's, else the
# client's last line).
pair_failure() {
  local pattern='error|fail|couldn|unable|not supported|invalid|timed? ?out|expired' why
  why=$(grep -m2 -iE "$pattern" "$PAIR_CLIENT_LOG" || grep -m2 -iE "$pattern" "$PAIR_SERVER_LOG" ||
    tail -n1 "$PAIR_CLIENT_LOG")
  why=$(tr -s ' \t' ' ' <<<"$why" | sed 's/^ //; s/ $//' | paste -sd';' | sed 's/;/; /g')
  if [[ $why =~ [Ff]ailed\ status\ ([0-9]+) ]] && ((BASH_REMATCH[1] < ${#WC_STATUS[@]})); then
    why+=" (IBV_WC_${WC_STATUS[BASH_REMATCH[1]]})"
  fi
  [[ $PAIR_CLIENT_STATUS -ne 0 ]] && why="client $(describe_status "$PAIR_CLIENT_STATUS"): $why"
  # 143: run_client_server stopped a server whose client had failed.
  if ((PAIR_SERVER_STATUS == 143 && PAIR_CLIENT_STATUS != 0)); then
    why+="; server stopped after the client failed"
  elif ((PAIR_SERVER_STATUS != 0)); then
    why="server $(describe_status "$PAIR_SERVER_STATUS"); $why"
  fi
  echo "$why"
}

# TOOL:SIZE runs TOOL with softverbs' defaults (MR pages shared, RC);
# private_TOOL:SIZE with SOFTVERBS_SHARE_MR_PAGES=0 on both sides;
# uc_TOOL:SIZE and ud_TOOL:SIZE on UC and UD QPs.
measure_perftest() {
  local id=$1 tool=${1%%:*} size=${1#*:} iterations sharing=(-u SOFTVERBS_SHARE_MR_PAGES)
  local connection=()
  [[ $tool == private_* ]] && tool=${tool#private_} sharing=(SOFTVERBS_SHARE_MR_PAGES=0)
  [[ $tool == uc_* ]] && tool=${tool#uc_} connection=(-c UC)
  [[ $tool == ud_* ]] && tool=${tool#ud_} connection=(-c UD)
  if [[ $tool == *_lat ]]; then iterations=$(latency_iterations "$size"); else iterations=$(bandwidth_iterations "$size" "$tool"); fi
  local args=(-d "$DEVICE" -F -p @PORT@ -n "$iterations" "${connection[@]}")
  # Atomics are 8 bytes by definition; perftest takes no size for them.
  [[ $tool != ib_atomic_* ]] && args+=(-s "$size")
  SERVER_CMD=(env "${sharing[@]}" "$CLI" run -- "$tool" "${args[@]}")
  CLIENT_CMD=(env "${sharing[@]}" "$CLI" run -- "$tool" "${args[@]}" localhost)
  local row=
  if run_client_server "${id/:/_}.r$ROUND" "$LIMIT"; then
    row=$(perftest_row "$PAIR_CLIENT_LOG")
  fi
  if [[ -z $row ]]; then
    record_failure "$id" "$(pair_failure)"
    return
  fi
  local -a f
  read -r -a f <<<"$row"
  if [[ $tool == *_lat ]]; then
    # t_typical is perftest's median; all three are one-way (half a round trip).
    record "$id" typical_us "${f[4]}"
    record "$id" avg_us "${f[5]}"
    record "$id" p99_us "${f[7]}"
    NOTE="${f[4]} us one-way (99%: ${f[7]} us)"
  else
    # perftest's MB/sec are MiB/s; the report uses GB/s (10^9 bytes).
    local gbps
    gbps=$(awk -v mib="${f[3]}" 'BEGIN { printf "%.6g", mib * 1048576 / 1e9 }')
    record "$id" gbps "$gbps"
    record "$id" mpps "${f[4]}"
    NOTE="$gbps GB/s, ${f[4]} Mmsg/s"
  fi
}

measure_fi_pingpong() {
  local id=$1 size=${1#*:} iterations
  iterations=$(latency_iterations "$size")
  local args=(-p shm -e rdm -I "$iterations" -S "$size")
  SERVER_CMD=(fi_pingpong "${args[@]}" -B @PORT@)
  CLIENT_CMD=(fi_pingpong "${args[@]}" -P @PORT@ 127.0.0.1)
  local row=
  if run_client_server "fi_pingpong_$size.r$ROUND" "$LIMIT"; then
    # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec; usec/xfer is
    # one-way (a round trip is two transfers), MB/sec is 10^6 bytes/s.
    row=$(awk 'NF >= 8 && $7 ~ /^[0-9.]+$/ { row = $0 } END { print row }' "$PAIR_CLIENT_LOG")
  fi
  if [[ -z $row ]]; then
    record_failure "$id" "$(pair_failure)"
    return
  fi
  local -a f
  read -r -a f <<<"$row"
  local gbps
  gbps=$(awk -v mb="${f[5]}" 'BEGIN { printf "%.6g", mb / 1000 }')
  record "$id" one_way_us "${f[6]}"
  record "$id" gbps "$gbps"
  NOTE="${f[6]} us one-way, $gbps GB/s"
}

# Runs one of the bench's own programs bounded by LIMIT; its stdout lands in
# $RUN_OUT. Fails with the program's last stderr line as the reason.
run_program() {
  local id=$1
  shift
  RUN_OUT="$PAIR_LOG_DIR/${id//[^A-Za-z0-9_.-]/_}.r$ROUND.out"
  local err="${RUN_OUT%.out}.err" status
  timeout --kill-after=5 "$LIMIT" "$@" >"$RUN_OUT" 2>"$err" </dev/null
  status=$?
  if ((status != 0)); then
    record_failure "$id" "$(describe_status $status): $(tail -n1 "$err")"
    return 1
  fi
}

measure_limit() {
  local id=$1 kind=${1%%:*} argument=${1#*:}
  case $kind in
    hop) argument=$( ((QUICK)) && echo 50000 || echo 200000) ;;
    stalls) argument=$( ((QUICK)) && echo 100000 || echo 300000) ;;
    futex) argument=$( ((QUICK)) && echo 5000 || echo 20000) ;;
    faults) argument=$( ((QUICK)) && echo 2000 || echo 10000) ;;
  esac
  run_program "$id" "$BENCH_BIN/bench_limits" "$kind" "$argument" || return
  case $kind in
    hop)
      record "$id" one_way_ns "$(value_of one_way_ns "$RUN_OUT")"
      NOTE="$(value_of one_way_ns "$RUN_OUT") ns one-way" ;;
    stalls)
      local key
      for key in p99_ns p999_ns stalled_pct stall_every_us; do record "$id" $key "$(value_of $key "$RUN_OUT")"; done
      NOTE="$(value_of stalled_pct "$RUN_OUT")% of round trips stalled, one every $(value_of stall_every_us "$RUN_OUT") us" ;;
    faults)
      record "$id" fault_ns "$(value_of fault_ns "$RUN_OUT")"
      NOTE="$(value_of fault_ns "$RUN_OUT") ns per first touch" ;;
    futex)
      record "$id" one_way_us "$(value_of one_way_us "$RUN_OUT")"
      NOTE="$(value_of one_way_us "$RUN_OUT") us one-way" ;;
    memcpy)
      record "$id" gbps "$(value_of gbps "$RUN_OUT")"
      NOTE="$(value_of gbps "$RUN_OUT") GB/s" ;;
    cma)
      record "$id" gbps "$(value_of gbps "$RUN_OUT")"
      record "$id" call_us "$(value_of call_us "$RUN_OUT")"
      NOTE="$(value_of gbps "$RUN_OUT") GB/s, $(value_of call_us "$RUN_OUT") us per call" ;;
  esac
}

# threads:T streams WRITEs, threads_send:T SENDs (each thread takes its own
# receives too).
measure_threads() {
  local id=$1 threads=${1#*:} opcode=write
  [[ $id == threads_send:* ]] && opcode=send
  run_program "$id" "$CLI" run -- "$BENCH_BIN/bench_threads" "$threads" "$THREAD_SECONDS" 8 $opcode || return
  record "$id" rate "$(value_of rate "$RUN_OUT")"
  record "$id" per_thread "$(value_of per_thread "$RUN_OUT")"
  NOTE="$(value_of rate "$RUN_OUT") msg/s in all, $(value_of per_thread "$RUN_OUT") per thread"
}

# thread_peers:T: T threads each ping-pong 8 B SENDs with a thread of a
# second process, blocking in ibv_get_cq_event for every completion.
measure_thread_peers() {
  local id=$1 threads=${1#*:}
  run_program "$id" "$CLI" run -- "$BENCH_BIN/bench_thread_peers" "$threads" "$THREAD_SECONDS" 8 events || return
  record "$id" rate "$(value_of rate "$RUN_OUT")"
  record "$id" per_thread "$(value_of per_thread "$RUN_OUT")"
  NOTE="$(value_of rate "$RUN_OUT") round trips/s in all, $(value_of per_thread "$RUN_OUT") per thread"
}

# utime + stime of a process, in clock ticks (fields 14 and 15 of
# /proc/PID/stat, counted after the command name, which may hold spaces).
cpu_ticks() {
  local stat
  stat=$(<"/proc/$1/stat") || return 1
  stat=${stat##*) }
  local -a f
  read -r -a f <<<"$stat"
  echo $((f[11] + f[12]))
}

# Run time in ns and context switches, summed over a process's threads
# (/proc/PID/task/*/schedstat and status): a finer view of an idle process
# than clock ticks, and how often it wakes up.
task_totals() {
  local task runtime=0 switches=0 line
  for task in /proc/"$1"/task/*; do
    read -r line <"$task/schedstat" || return 1
    runtime=$((runtime + ${line%% *}))
    switches=$((switches + $(awk '/ctxt_switches/ { s += $2 } END { print s + 0 }' "$task/status")))
  done
  echo "$runtime $switches"
}

# Creates N QPs in loopback pairs (time and memory), then reads the
# process's CPU time while it holds them idle for IDLE_SECONDS.
measure_qps() {
  local id=$1 count=${1#*:}
  RUN_OUT="$PAIR_LOG_DIR/qps_$count.r$ROUND.out"
  local err="${RUN_OUT%.out}.err"
  timeout --kill-after=5 "$LIMIT" "$CLI" run -- "$BENCH_BIN/bench_qps" "$count" "$((IDLE_SECONDS + 2))" \
    >"$RUN_OUT" 2>"$err" </dev/null &
  local runner=$!
  local deadline=$((SECONDS + LIMIT))
  until grep -q '^holding' "$RUN_OUT" 2>/dev/null; do
    if ! kill -0 "$runner" 2>/dev/null || ((SECONDS >= deadline)); then break; fi
    sleep 0.05
  done
  local pid ticks_before ticks_after begin end totals_before="" totals_after=""
  pid=$(value_of pid "$RUN_OUT")
  if [[ -n $pid ]] && ticks_before=$(cpu_ticks "$pid"); then
    totals_before=$(task_totals "$pid")
    begin=$(date +%s.%N)
    sleep "$IDLE_SECONDS"
    ticks_after=$(cpu_ticks "$pid")
    totals_after=$(task_totals "$pid")
    end=$(date +%s.%N)
  fi
  wait "$runner"
  local status=$?
  if [[ -z ${ticks_after:-} ]] || ((status != 0)); then
    record_failure "$id" "$(describe_status $status): $(tail -n1 "$err")"
    return
  fi
  local cpu rss
  cpu=$(awk -v t=$((ticks_after - ticks_before)) -v hz="$(getconf CLK_TCK)" -v b="$begin" -v e="$end" \
    'BEGIN { printf "%.4f", 100 * t / hz / (e - b) }')
  rss=$(awk -v kib="$(value_of rss_kib "$RUN_OUT")" 'BEGIN { printf "%.1f", kib / 1024 }')
  record "$id" created "$(value_of created "$RUN_OUT")"
  record "$id" seconds "$(value_of seconds "$RUN_OUT")"
  record "$id" create_seconds "$(value_of create_seconds "$RUN_OUT")"
  record "$id" connect_seconds "$(value_of connect_seconds "$RUN_OUT")"
  record "$id" destroy_seconds "$(value_of destroy_seconds "$RUN_OUT")"
  record "$id" rss_mib "$rss"
  record "$id" idle_cpu_pct "$cpu"
  if [[ -n $totals_before && -n $totals_after ]]; then
    awk -v b="$totals_before" -v a="$totals_after" -v t0="$begin" -v t1="$end" -v round="$ROUND" -v id="$id" '
      BEGIN {
        split(b, before, " "); split(a, after, " ")
        printf "%s\t%s\tidle_runtime_pct\t%.4f\n", round, id, 100 * (after[1] - before[1]) / 1e9 / (t1 - t0)
        printf "%s\t%s\tidle_wakeups_per_s\t%.1f\n", round, id, (after[2] - before[2]) / (t1 - t0)
      }' >>"$SAMPLES"
  fi
  NOTE="$(value_of created "$RUN_OUT") QPs in $(value_of seconds "$RUN_OUT") s, $rss MiB; idle: $cpu% of a core"
  [[ -s $err ]] && NOTE+=" ($(tail -n1 "$err"))"
}

# reg_mr:BYTES: ibv_reg_mr of BYTES of touched anonymous memory, with
# softverbs' defaults (MR pages shared; from 16 MiB once a peer reaches
# them); private_reg_mr:BYTES with SOFTVERBS_SHARE_MR_PAGES=0. Figures:
# reg_us and dereg_us, per call (softverbs_bench's reg_mr).
measure_reg_mr() {
  local id=$1 bytes=${1#*:} sharing=(-u SOFTVERBS_SHARE_MR_PAGES)
  [[ $id == private_* ]] && sharing=(SOFTVERBS_SHARE_MR_PAGES=0)
  run_program "$id" env "${sharing[@]}" "$CLI" run -- "$BENCH_BIN/softverbs_bench" \
    --benchmark_format=csv --benchmark_filter="^reg_mr/$bytes/" || return
  local figures
  figures=$(awk -F, '
    function unquote(s) { gsub(/^"|"$/, "", s); return s }
    $1 == "name" { for (i = 1; i <= NF; i++) column[unquote($i)] = i; next }
    column["reg_us"] && $column["reg_us"] != "" { print $column["reg_us"], $column["dereg_us"] }' "$RUN_OUT")
  if [[ -z $figures ]]; then
    record_failure "$id" "softverbs_bench printed no reg_mr/$bytes row"
    return
  fi
  record "$id" reg_us "${figures% *}"
  record "$id" dereg_us "${figures#* }"
  NOTE="ibv_reg_mr ${figures% *} us, ibv_dereg_mr ${figures#* } us"
}

# A family of Google Benchmark micro-benchmarks, as CSV; one sample per
# benchmark and figure: ns (wall time per iteration), gbps, one_way_us.
measure_gbench() {
  local id=$1 filter=${1#*:}
  run_program "$id" "$CLI" run -- "$BENCH_BIN/softverbs_bench" --benchmark_format=csv \
    --benchmark_filter="$filter" --benchmark_min_time="$GBENCH_MIN_TIME" || return
  local rows
  rows=$(awk -F, -v round="$ROUND" '
    function unquote(s) { gsub(/^"|"$/, "", s); return s }
    $1 == "name" { for (i = 1; i <= NF; i++) column[unquote($i)] = i; header = 1; next }
    !header { next }
    {
      id = "gbench:" unquote($column["name"])
      if (column["error_occurred"] && unquote($column["error_occurred"]) == "true") {
        message = $column["error_message"]
        for (i = column["error_message"] + 1; i <= NF; i++) message = message "," $i
        sub(/,+$/, "", message)
        printf "%s\t%s\terror\t%s\n", round, id, unquote(message); next
      }
      unit = unquote($column["time_unit"])
      scale = unit == "us" ? 1e3 : unit == "ms" ? 1e6 : unit == "s" ? 1e9 : 1
      printf "%s\t%s\tns\t%.6g\n", round, id, $column["real_time"] * scale
      if (column["bytes_per_second"] && $column["bytes_per_second"] != "")
        printf "%s\t%s\tgbps\t%.6g\n", round, id, $column["bytes_per_second"] / 1e9
      if (column["one_way_us"] && $column["one_way_us"] != "")
        printf "%s\t%s\tone_way_us\t%.6g\n", round, id, $column["one_way_us"]
    }' "$RUN_OUT")
  if [[ -z $rows ]]; then
    record_failure "$id" "no benchmark matched $filter"
    return
  fi
  printf '%s\n' "$rows" >>"$SAMPLES"
  NOTE="$(grep -c . <<<"$rows") figures, $(grep -c $'\terror\t' <<<"$rows") failed"
}

measure() {
  NOTE=
  case $1 in
    ib_* | private_ib_* | uc_ib_* | ud_ib_*) measure_perftest "$1" ;;
    fi_pingpong:*) measure_fi_pingpong "$1" ;;
    hop | stalls | futex | faults | memcpy:* | cma:*) measure_limit "$1" ;;
    threads:* | threads_send:*) measure_threads "$1" ;;
    thread_peers:*) measure_thread_peers "$1" ;;
    qps:*) measure_qps "$1" ;;
    gbench:*) measure_gbench "$1" ;;
    reg_mr:* | private_reg_mr:*) measure_reg_mr "$1" ;;
    *) record_failure "$1" "unknown measurement" ;;
  esac
}
