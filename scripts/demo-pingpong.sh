#!/usr/bin/env bash
# Runs rdma-core's unmodified ibv_rc_pingpong between two processes on the
# soft device softverbs0: a server in the background, a client against it on
# localhost, each bounded in time. Prints both sides' output; fails if either
# side fails.
#
# Usage: scripts/demo-pingpong.sh [BUILD_DIR] [-- EXTRA ibv_rc_pingpong ARGS]
#   BUILD_DIR defaults to build/ (what scripts/build.sh makes).
#   DEMO_TIMEOUT (seconds, default 60) bounds each side.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/lib/client-server.sh"

build_dir="$root/build"
if [[ $# -gt 0 && $1 != -- ]]; then
  build_dir=$(realpath -m "$1")
  shift
fi
[[ ${1:-} == -- ]] && shift
extra_args=("$@")

cli="$build_dir/harness/cli/softverbs"
if [[ ! -x $cli ]]; then
  echo "demo-pingpong: $cli is not built; run: bash scripts/build.sh" >&2
  exit 1
fi
if ! command -v ibv_rc_pingpong >/dev/null; then
  echo "demo-pingpong: ibv_rc_pingpong is missing (package ibverbs-utils); run: bash scripts/setup.sh" >&2
  exit 1
fi

limit=${DEMO_TIMEOUT:-60}
SERVER_CMD=("$cli" run -- ibv_rc_pingpong -d softverbs0 -p @PORT@ "${extra_args[@]}")
CLIENT_CMD=("$cli" run -- ibv_rc_pingpong -d softverbs0 -p @PORT@ "${extra_args[@]}" localhost)

echo "== softverbs devices"
"$cli" devices
echo
echo "== ibv_rc_pingpong -d softverbs0${extra_args[*]:+ ${extra_args[*]}}: server and client, two processes"
status=0
run_client_server pingpong "$limit" || status=$?
print_client_server_logs
echo
echo "server: $(describe_status "$PAIR_SERVER_STATUS"), client: $(describe_status "$PAIR_CLIENT_STATUS")"
if ((status == 0)); then
  echo "demo-pingpong: PASSED"
else
  echo "demo-pingpong: FAILED"
fi
rm -rf "$PAIR_LOG_DIR"
exit "$status"
