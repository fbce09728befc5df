#!/usr/bin/env bash
# Builds the Debian package of softverbs (a release build of the CLI and the
# libraries, packaged by CPack) into BUILD_DIR (default build-package/) and
# prints its path.
#
# Usage: scripts/package.sh [BUILD_DIR]
#   SOFTVERBS_JOBS  parallel compile jobs (default: number of cores)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${1:-$root/build-package}
case ${1:-} in
  -h|--help) sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
command -v dpkg-shlibdeps >/dev/null ||
  { echo "package: dpkg-shlibdeps is missing (package dpkg-dev); run scripts/setup.sh" >&2; exit 1; }

cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DSOFTVERBS_SANITIZE=OFF -DSOFTVERBS_TSAN=OFF -DSOFTVERBS_BUILD_BENCH=OFF >/dev/null
# Only what the package holds: no tests, no benchmarks. The build's output
# goes to stderr, so that a caller taking the path from stdout still sees
# why a build failed.
cmake --build "$build_dir" -j "${SOFTVERBS_JOBS:-$(nproc)}" \
  --target softverbs_cli softverbs_provider softverbs_ibverbs_shim softverbs_man_pages >&2
(cd "$build_dir" && cpack -G DEB >/dev/null)
ls "$build_dir"/softverbs_*.deb
