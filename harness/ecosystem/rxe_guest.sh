#!/usr/bin/env bash
# The ecosystem tier's stacks that the rxe-vm guest has, on the kernel's rxe0
# (RoCE on a dummy interface at 192.0.2.1): Open MPI with UCX rc_v and
# ud_v, with mtl ofi over libfabric's verbs;ofi_rxm, UCX's io_demo, and
# rsocket-preloaded iperf. Run by scripts/ecosystem-report.sh inside the guest; prints one
# line per case: "case NAME: pass|FAIL|skip: what it showed".
set -uo pipefail
address=192.0.2.1
cd /tmp  # NetPIPE writes np.out where it runs; /host is the repository
# Open MPI's launcher refuses a node without a name, which the guest has not.
[[ $(hostname) == "(none)" ]] && hostname rxe-guest

report() {  # report NAME STATUS LOG SUMMARY
  local name=$1 status=$2 log=$3 text=$4
  if ((status == 0)); then echo "case $name: pass: $text"
  else
    # The first line that says what went wrong, else the first lines.
    local why
    why=$(grep -m1 -iE 'fatal|error|no components' "$log" || grep -v '^ *$\|^---' "$log" | head -n 3)
    echo "case $name: FAIL: exit $status: $(echo "$why" | tr '\n' ' ' | tr -s ' ' | cut -c1-240)"
  fi
}

netpipe() {  # netpipe NAME MPIRUN_ARGS...
  local name=$1 log=/tmp/$1.log
  shift
  timeout -k 5 300 mpirun --allow-run-as-root --oversubscribe -np 2 "$@" NPopenmpi -i -u 1048576 >"$log" 2>&1
  local status=$?
  local passed
  passed=$(grep -c 'Integrity check passed' "$log")
  ((passed >= 30 || status != 0)) || status=1  # every size must have been checked
  report "$name" "$status" "$log" "NetPIPE passed $passed sizes"
}

ucx=(--mca pml ucx --mca btl ^vader,openib,uct --mca pml_ucx_tls any --mca pml_ucx_devices any
  -x UCX_NET_DEVICES=rxe0:1)
netpipe mpi_openmpi_ucx_rc_eth "${ucx[@]}" -x UCX_TLS=rc_v,self
netpipe mpi_openmpi_ucx_ud_eth "${ucx[@]}" -x UCX_TLS=ud_v,self
netpipe mpi_openmpi_ofi_eth --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "verbs;ofi_rxm"
echo "case mpi_openmpi_openib_ib: skip: rxe is RoCE; Debian's btl openib connects over InfiniBand only"

# UCX's io_demo over rdmacm, with its data check.
ucx_env=(env UCX_TLS=rc_v,ud_v,rdmacm UCX_NET_DEVICES=rxe0:1)
timeout -k 5 200 "${ucx_env[@]}" io_demo -p 7000 -q -d 1:65536 >/tmp/io_demo-server.log 2>&1 &
server=$!
sleep 3
timeout -k 5 180 "${ucx_env[@]}" io_demo -p 7000 -q -d 1:65536 -i 500 -o read,write $address \
  >/tmp/io_demo.log 2>&1
status=$?
grep -q "Client exit with status 'OK'" /tmp/io_demo.log || ((status != 0)) || status=1
report ucx_io_demo_eth "$status" /tmp/io_demo.log "io_demo -q, 500 iterations of read and write, OK"
kill $server 2>/dev/null

preload=$(ls /usr/lib/x86_64-linux-gnu/rsocket/librspreload.so* 2>/dev/null | head -1)
if [[ -z $preload ]] || ! command -v iperf >/dev/null; then
  echo "case rsocket_iperf_eth: skip: the guest lacks iperf or librspreload"
else
  LD_PRELOAD=$preload timeout -k 5 60 iperf -s -B $address -p 5201 >/tmp/iperf-server.log 2>&1 &
  sleep 2
  results=() status=0
  for streams in 1 4; do
    LD_PRELOAD=$preload timeout -k 5 40 iperf -c $address -p 5201 -t 3 -P $streams >/tmp/iperf-$streams.log 2>&1 ||
      status=$?
    results+=("iperf -P $streams: $(grep -E '^\[ *(SUM|1)\].*sec' /tmp/iperf-$streams.log | tail -1 | grep -oE '[0-9.]+ [GMK]bits/sec')")
  done
  kill %1 2>/dev/null
  report rsocket_iperf_eth "$status" /tmp/iperf-4.log "${results[0]}; ${results[1]}"
fi
