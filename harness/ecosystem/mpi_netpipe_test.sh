#!/usr/bin/env bash
# NetPIPE's integrity check (-i: every byte of every message compared, sizes
# 1 byte to 1 MiB) between two MPI ranks of one host whose only path is
# softverbs0: Open MPI with UCX (rc_v or ud_v), with btl openib, with
# mtl ofi over libfabric's verbs;ofi_rxm, and MPICH with UCX. Passes when
# NetPIPE passes every size, the job ends with status 0 and the ranks'
# frames went through the soft devices.
#
# Usage: mpi_netpipe_test.sh PATH/TO/softverbs STACK LINK_LAYER
#   STACK: openmpi_ucx_rc, openmpi_ucx_ud, openmpi_openib, openmpi_ofi, mpich_ucx
#   LINK_LAYER: ib or eth
set -uo pipefail
stack=${2:?say the stack: openmpi_ucx_rc, openmpi_ucx_ud, openmpi_openib, openmpi_ofi or mpich_ucx}
link_layer=${3:?say the link layer: ib or eth}
test_name=mpi_${stack}_${link_layer}
source "$(dirname "${BASH_SOURCE[0]}")/ecosystem_lib.sh"
export SOFTVERBS_LINK_LAYER=$link_layer

# Open MPI's UCX component takes only devices whose driver it knows (mlx*)
# unless told any; without a shared-memory transport in UCX_TLS, and with
# btl vader and uct out, the ranks of one host meet on softverbs0 only.
# UCX looks for the device's files as well as its verbs: --device-files.
openmpi_ucx() {
  job=("$cli" run --device-files -- mpirun --allow-run-as-root --oversubscribe -np 2
    --mca pml ucx --mca btl ^vader,openib,uct --mca pml_ucx_tls any --mca pml_ucx_devices any
    -x UCX_TLS="$1",self -x UCX_NET_DEVICES=softverbs0:1 NPopenmpi -i -u 1048576)
}

case $stack in
  openmpi_ucx_rc | openmpi_ucx_ud | openmpi_openib | openmpi_ofi) need_packages openmpi-bin netpipe-openmpi ;;
  mpich_ucx) need_packages mpich netpipe-mpich2 ;;
  *) echo "unknown stack '$stack'" >&2; exit 2 ;;
esac

program=NPopenmpi
job=()
case $stack in
  openmpi_ucx_rc) openmpi_ucx rc_v ;;
  openmpi_ucx_ud) openmpi_ucx ud_v ;;
  # Debian builds openib with udcm only, which needs the InfiniBand
  # personality; openib refuses devices with IB link layer unless allowed.
  openmpi_openib)
    job=("$cli" run -- mpirun --allow-run-as-root --oversubscribe -np 2 --mca pml ob1
      --mca btl openib,self --mca btl_openib_allow_ib 1 --mca btl_openib_if_include softverbs0:1
      NPopenmpi -i -u 1048576) ;;
  # libfabric's verbs provider under its RDM layer, ofi_rxm.
  openmpi_ofi)
    job=("$cli" run -- mpirun --allow-run-as-root --oversubscribe -np 2 --mca pml cm --mca mtl ofi
      --mca mtl_ofi_provider_include "verbs;ofi_rxm" NPopenmpi -i -u 1048576) ;;
  # MPICH keeps ranks of one host in shared memory unless NOLOCAL says
  # every rank is remote: then UCX carries everything.
  mpich_ucx)
    program=NPmpich2
    job=("$cli" run --device-files -- mpiexec.mpich -n 2 -genv MPIR_CVAR_NOLOCAL 1
      -genv UCX_TLS rc_v,self -genv UCX_NET_DEVICES softverbs0:1 NPmpich2 -i -u 1048576) ;;
esac
if [[ $stack == openmpi_openib && $link_layer != ib ]]; then
  skip "Debian's Open MPI builds btl openib with the udcm connection manager only, which needs InfiniBand"
fi

watch_traffic "$program"
bounded 180 "${job[@]}" >"$work/job.log" 2>&1
status=$?
check
((status == 0)) || fail "the MPI job exited with $status"
passed=$(grep -c 'Integrity check passed' "$work/job.log")
failed=$(grep -c 'Integrity check failed' "$work/job.log")
check
((passed >= 30 && failed == 0)) || fail "NetPIPE: $passed sizes passed, $failed failed (30 or more must pass, none fail)"
check_traffic
echo "$test_name: NetPIPE passed $passed sizes; $frames frames through softverbs0 in one rank"
((failures == 0)) || tail -30 "$work/job.log"
finish
