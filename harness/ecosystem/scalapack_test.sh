#!/usr/bin/env bash
# ScaLAPACK's own testers, two Open MPI ranks over UCX's rc_v on softverbs0
# (no shared-memory path between them): a dozen drivers (LU, QR, Cholesky,
# inverse, least squares, reductions to bidiagonal, Hessenberg and
# tridiagonal form, the nonsymmetric eigenproblem; real and complex double)
# with their residual checks, and the PBLAS level 1, 2 and 3 tests. Grids
# of more than two processes are the testers' own to skip. Passes when every
# tester exits 0, none reports a failed check, each reports passed ones, and
# the ranks' frames went through the soft devices.
#
# Usage: scalapack_test.sh PATH/TO/softverbs
set -uo pipefail
test_name=scalapack
source "$(dirname "${BASH_SOURCE[0]}")/ecosystem_lib.sh"
need_packages openmpi-bin scalapack-mpi-test

tests=/usr/lib/x86_64-linux-gnu/scalapack/openmpi-tests
[[ -d $tests ]] || skip "scalapack-mpi-test has no $tests"
# The testers read their .dat inputs from the working directory.
cp -L "$tests"/*.dat "$tests"/PBLAS/*.dat "$work/"
cd "$work" || exit 1

drivers=(xdlu xdqr xdllt xdinv xdls xdbrd xdhrd xdtrd xdnep xzlu xzqr xzllt)
pblas=(dpb1tst dpb2tst dpb3tst zpb1tst zpb2tst zpb3tst)
watch_traffic "${drivers[0]}"
for tester in "${drivers[@]}" "${pblas[@]}"; do
  binary=$tests/$tester
  [[ -x $binary ]] || binary=$tests/PBLAS/$tester
  bounded 120 "$cli" run --device-files -- mpirun --allow-run-as-root --oversubscribe -np 2 \
    --mca pml ucx --mca btl ^vader,openib,uct --mca pml_ucx_tls any --mca pml_ucx_devices any \
    -x UCX_TLS=rc_v,self -x UCX_NET_DEVICES=softverbs0:1 "$binary" >"$tester.log" 2>&1
  status=$?
  check
  if ((status != 0)); then
    fail "$tester exited with $status"
  elif [[ $tester == x* ]]; then
    passed=$(awk '/tests completed and passed residual checks/ { s += $1 } END { print s + 0 }' "$tester.log")
    failed=$(awk '/tests completed and failed residual checks/ { s += $1 } END { print s + 0 }' "$tester.log")
    ((passed > 0 && failed == 0)) || fail "$tester: $passed passed, $failed failed residual checks"
  else
    # The summary table: | NAME TOTAL PASSED FAILED SKIPPED
    read -r passed failed < <(awk '$1 == "|" { p += $4; f += $5 } END { print p + 0, f + 0 }' "$tester.log")
    ((passed > 0 && failed == 0)) || fail "$tester: $passed passed, $failed failed"
  fi
  ((failures == 0)) || { tail -n 20 "$tester.log"; break; }
done
check_traffic
echo "$test_name: ${#drivers[@]} drivers and ${#pblas[@]} PBLAS testers on two ranks; $frames frames through softverbs0 in ${drivers[0]}"
finish
