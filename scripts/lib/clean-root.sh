# A clean Debian 12 root file system to install the package into, as a
# stock `debian:12` CI container would have it: sourced by test-package.sh
# and test-recipe.sh. Needs root (debootstrap, chroot, mounts).
#
#   clean_root_prepare WHO [DEB]  exits 77 unless root; sets clean_root_deb
#                               to DEB, or to the package scripts/package.sh
#                               builds; makes the root file system
#   clean_root_make             debootstrap's minbase of bookworm with the
#                               packages below, made once and kept in
#                               $clean_root_rootfs; made again when the
#                               list changes
#   clean_root_copy WORK        a throw-away copy of it in WORK/root
#   clean_root_mount NEW_ROOT   (in a private mount namespace) /proc, /dev,
#                               a 256 MiB /dev/shm and the host's resolver
#
# The packages: what the package test runs (ibverbs-utils, man-db) and what
# the CI recipes' projects build with (cmake, g++, make, libibverbs-dev), so
# that a recipe's `apt-get install` finds them there and each recipe does
# not download a compiler again.

clean_root_rootfs=${SOFTVERBS_PACKAGE_ROOTFS:-/var/tmp/softverbs-package-rootfs}
clean_root_packages=ibverbs-utils,librdmacm1,man-db,cmake,g++,make,libibverbs-dev

clean_root_prepare() {
  local who=$1 deb=${2:-}
  if (($(id -u) != 0)); then
    echo "$who: skipped: needs root for debootstrap, chroot and mounts"
    exit 77
  fi
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  clean_root_deb=${deb:-$(bash "$here/scripts/package.sh" | tail -1)}
  [[ -f $clean_root_deb ]] || { echo "$who: no package at $clean_root_deb" >&2; exit 1; }
  clean_root_make
}

clean_root_make() {
  [[ $(cat "$clean_root_rootfs/.complete" 2>/dev/null) == "$clean_root_packages" ]] && return 0
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
  rm -rf "$clean_root_rootfs"
  echo "making a Debian 12 root file system in $clean_root_rootfs (once; about 3 minutes)"
  debootstrap --variant=minbase --include="$clean_root_packages" bookworm "$clean_root_rootfs" \
    http://deb.debian.org/debian >"$clean_root_rootfs.log" 2>&1 ||
    { echo "debootstrap failed; see $clean_root_rootfs.log" >&2; return 1; }
  echo "$clean_root_packages" >"$clean_root_rootfs/.complete"
}

clean_root_copy() {
  cp -a "$clean_root_rootfs" "$1/root"
}

clean_root_mount() {
  local new_root=$1
  mount -t proc proc "$new_root/proc"
  mount --rbind /dev "$new_root/dev"
  mount -t tmpfs -o mode=1777,size=256m tmpfs "$new_root/dev/shm"
  # The copy is thrown away: the host's resolver for apt-get in it.
  cp -L /etc/resolv.conf "$new_root/etc/resolv.conf" 2>/dev/null || true
}
