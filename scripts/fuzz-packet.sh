#!/usr/bin/env bash
# Builds the libFuzzer targets of the packet decoder (packet_decode_fuzzer)
# and of the UDP wire's receive path (roce_receive_fuzzer) with clang, ASan
# and UBSan in its own tree, then fuzzes each for a bounded time.
# Exits non-zero when the fuzzer finds a crash, an out-of-bounds access, a
# leak or undefined behaviour; the offending input is kept in
# BUILD_DIR/<target>-artifacts/ and the corpus grows in
# BUILD_DIR/<target>-corpus/ from run to run.
#
# Usage: scripts/fuzz-packet.sh [SECONDS]
#   SECONDS  how long to fuzz each target (default 60)
#   SOFTVERBS_FUZZ_BUILD_DIR  build tree (default build-fuzz/)
#   SOFTVERBS_JOBS  parallel compile jobs (default: number of cores)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-60}
case $seconds in
  -h|--help)
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0 ;;
  ''|*[!0-9]*) echo "fuzz-packet: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;;
esac
build_dir=${SOFTVERBS_FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${SOFTVERBS_JOBS:-$(nproc)}

for tool in clang clang++ cmake ninja; do
  command -v $tool >/dev/null || {
    echo "fuzz-packet: $tool is missing; run: apt-get install -y clang libclang-rt-14-dev cmake ninja-build" >&2
    exit 1
  }
done

# libFuzzer only exists for clang; a tree configured with another compiler
# would silently leave the fuzzer target out.
if [[ -f $build_dir/CMakeCache.txt ]] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$build_dir/CMakeCache.txt"; then
  echo "fuzz-packet: $build_dir was configured with a compiler other than clang; remove it or set SOFTVERBS_FUZZ_BUILD_DIR" >&2
  exit 1
fi

echo "fuzz-packet: building in $build_dir ($jobs jobs)"
CC=clang CXX=clang++ cmake -S "$root" -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSOFTVERBS_BUILD_BENCH=OFF >/dev/null
ninja -C "$build_dir" -j "$jobs" packet_decode_fuzzer roce_receive_fuzzer

# fuzz TARGET WHAT MAX_LEN: one target for the time given, its corpus and
# artifacts kept apart.
fuzz() {
  local target=$1 what=$2 max_len=$3
  local corpus=$build_dir/$target-corpus artifacts=$build_dir/$target-artifacts
  mkdir -p "$corpus" "$artifacts"
  echo "fuzz-packet: fuzzing $what for ${seconds}s"
  "$build_dir/emulator/packet/$target" \
    -max_total_time="$seconds" \
    -max_len="$max_len" \
    -timeout=10 \
    -print_final_stats=1 \
    -artifact_prefix="$artifacts/" \
    "$corpus"
}

# max_len: the largest frame an 11-bit LRH PktLen describes (2047 words);
# for a datagram, 34 bytes of addresses and the largest RoCEv2 payload.
fuzz packet_decode_fuzzer "decode_ib" 8188
fuzz roce_receive_fuzzer "the UDP receive path (roce_v2_to_ib, decode_ib)" 4258
