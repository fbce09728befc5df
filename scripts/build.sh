#!/usr/bin/env bash
# Configures and builds softverbs with CMake and Ninja (through ccache when
# it is installed).
#
# Usage: scripts/build.sh [--sanitize | --tsan] [BUILD_DIR]
#   BUILD_DIR   default build/, build-asan/ with --sanitize, build-tsan/ with --tsan
#   --sanitize  AddressSanitizer + UndefinedBehaviorSanitizer, no benchmarks
#   --tsan      ThreadSanitizer, no benchmarks
#   SOFTVERBS_JOBS  parallel compile jobs (default: number of cores)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sanitize=no
build_dir=
for arg in "$@"; do
  case $arg in
    --sanitize) sanitize=yes ;;
    --tsan) sanitize=thread ;;
    -h|--help)
      sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0 ;;
    -*) echo "build: unknown option $arg (try --help)" >&2; exit 2 ;;
    *)
      [[ -z $build_dir ]] || { echo "build: more than one build directory given" >&2; exit 2; }
      build_dir=$arg ;;
  esac
done

options=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [[ $sanitize == yes ]]; then
  build_dir=${build_dir:-$root/build-asan}
  options+=(-DSOFTVERBS_SANITIZE=ON -DSOFTVERBS_TSAN=OFF -DSOFTVERBS_BUILD_BENCH=OFF)
elif [[ $sanitize == thread ]]; then
  build_dir=${build_dir:-$root/build-tsan}
  options+=(-DSOFTVERBS_SANITIZE=OFF -DSOFTVERBS_TSAN=ON -DSOFTVERBS_BUILD_BENCH=OFF)
else
  build_dir=${build_dir:-$root/build}
  options+=(-DSOFTVERBS_SANITIZE=OFF -DSOFTVERBS_TSAN=OFF)
fi

for tool in cmake ninja c++; do
  command -v $tool >/dev/null || { echo "build: $tool is missing; run: bash scripts/setup.sh" >&2; exit 1; }
done

if [[ -f $build_dir/CMakeCache.txt ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$build_dir/CMakeCache.txt"; then
  echo "build: $build_dir was configured with another generator; remove it or pick another directory" >&2
  exit 1
fi

jobs=${SOFTVERBS_JOBS:-$(nproc)}
echo "build: $build_dir (sanitize: $sanitize, $jobs jobs)"
cmake -S "$root" -B "$build_dir" -G Ninja "${options[@]}"
ninja -C "$build_dir" -j "$jobs"
