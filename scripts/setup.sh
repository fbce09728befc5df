#!/usr/bin/env bash
# Installs everything softverbs needs to build, test, benchmark and run CI on
# Debian 12. Run it as root on a fresh machine; run it again at any time (it
# only installs what is missing). As another user it checks, and says what
# to install when something is missing.
set -euo pipefail

packages=(
  # build
  build-essential cmake ninja-build ccache pkg-config binutils
  # the verbs and RDMA CM libraries softverbs interposes and links against
  libibverbs-dev librdmacm-dev
  # unit, conformance and benchmark frameworks
  libgtest-dev libgmock-dev libbenchmark-dev
  # the unmodified programs the end-to-end tests and benchmarks run
  ibverbs-utils perftest rdmacm-utils
  # ucx_info, which looks for a device's files as well as its verbs
  ucx-utils
  # qperf: its UD and RC tests run in the real-programs test
  qperf
  # the bench's reference (fi_pingpong over libfabric's shm provider) and its plots
  libfabric-bin gnuplot-nox
  # tshark decodes the CM messages' bytes as Wireshark would, in their tests
  tshark
  # the libFuzzer build of the packet parser
  clang libclang-rt-14-dev
  # the scripts: timeout (coreutils), awk, ps/pgrep (procps), ss/ip (iproute2),
  # unshare/chroot for the namespace tests (util-linux, coreutils)
  coreutils mawk procps iproute2 util-linux
  # a forked test peer that hangs has its threads' stacks printed before it is killed
  gdb
  # the Debian package (dpkg-shlibdeps) and its test in a clean root file system
  dpkg-dev debootstrap
  # the manual pages' test formats them (groff-base with man-db) and reads them (col)
  man-db bsdextrautils
  # ibstat and ibstatus, shown the soft devices by --device-files
  infiniband-diags
)

is_installed() {
  [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]
}

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
  echo "setup: this script installs with apt on Debian 12; on this system install by hand:" >&2
  echo "  ${packages[*]}" >&2
  exit 1
fi

missing=()
for package in "${packages[@]}"; do
  is_installed "$package" || missing+=("$package")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages are installed"
  exit 0
fi

if ((EUID == 0)); then
  as_root=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: installing them needs root; run as root:" >&2
  echo "  bash scripts/setup.sh" >&2
  echo "or install them yourself:" >&2
  echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get -o Acquire::Retries=3 update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get -o Acquire::Retries=3 install -y --no-install-recommends "${missing[@]}"

still_missing=()
for package in "${missing[@]}"; do
  is_installed "$package" || still_missing+=("$package")
done
if ((${#still_missing[@]} > 0)); then
  echo "setup: still missing after apt-get: ${still_missing[*]}" >&2
  exit 1
fi
echo "setup: done"
