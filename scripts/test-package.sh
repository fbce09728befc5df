#!/usr/bin/env bash
# Installs the Debian package into a clean Debian 12 root file system and
# runs verbs programs from it as an unprivileged user, the way the CI
# recipes in docs/ci-recipes.md do in a stock container:
#   - the root file system: debootstrap's minbase of bookworm with
#     ibverbs-utils, man-db and a compiler (scripts/lib/clean-root.sh), made
#     once and kept (SOFTVERBS_PACKAGE_ROOTFS, default
#     /var/tmp/softverbs-package-rootfs);
#   - a throw-away copy of it gets the package (dpkg -i), /proc and /dev,
#     inside a private mount namespace, so nothing outlives the run;
#   - as user nobody: `man softverbs` and `man 7 softverbs`, `softverbs
#     devices`, `softverbs run -- ibv_devinfo`, an ibv_rc_pingpong pair and an
#     ibv_ud_pingpong pair with the data checked.
# Needs root (debootstrap, chroot, mounts): otherwise it exits 77.
#
# Usage: scripts/test-package.sh [PATH/TO/softverbs_VERSION_amd64.deb]
#   without a path, scripts/package.sh builds it first.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case ${1:-} in
  -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
source "$root/scripts/lib/clean-root.sh"
clean_root_prepare test-package "${1:-}"
deb=$clean_root_deb

work=$(mktemp -d /var/tmp/softverbs-package-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
clean_root_copy "$work"
cp "$deb" "$work/root/tmp/softverbs.deb"

# Everything below runs in a mount namespace of its own: its mounts go
# with it.
unshare --mount --propagation private bash -euo pipefail -s "$work/root" "$root" <<'INSIDE'
new_root=$1
source "$2/scripts/lib/clean-root.sh"
clean_root_mount "$new_root"
chroot "$new_root" dpkg -i /tmp/softverbs.deb >/dev/null
as_user() { chroot --userspec=nobody:nogroup "$new_root" env -i PATH=/usr/bin:/bin HOME=/tmp "$@"; }

as_user man -P cat softverbs 2>/dev/null | grep -q '^ *softverbs run' ||
  { echo "FAIL: man softverbs"; exit 1; }
as_user man -P cat 7 softverbs 2>/dev/null | grep -q '^ *SOFTVERBS_SHM_PREFIX' ||
  { echo "FAIL: man 7 softverbs"; exit 1; }
echo "ok: man softverbs and man 7 softverbs from the installed package, as nobody"
as_user softverbs devices | grep -q '^softverbs0 ' || { echo "FAIL: softverbs devices"; exit 1; }
as_user softverbs run -- ibv_devinfo | grep -q 'hca_id:.softverbs0' ||
  { echo "FAIL: ibv_devinfo under softverbs run"; exit 1; }
for program in ibv_rc_pingpong ibv_ud_pingpong; do
  port=$((20000 + RANDOM % 12000))
  as_user timeout 60 softverbs run -- $program -d softverbs0 -g 0 -c -n 200 -p $port \
    >/tmp/server.log 2>&1 &
  server=$!
  sleep 0.5
  if ! as_user timeout 60 softverbs run -- $program -d softverbs0 -g 0 -c -n 200 -p $port \
      127.0.0.1 >/tmp/client.log 2>&1 || ! wait $server; then
    echo "FAIL: $program from the package"; cat /tmp/server.log /tmp/client.log; exit 1
  fi
  grep -q 'iters in' /tmp/client.log || { echo "FAIL: $program printed no result"; exit 1; }
  echo "ok: $program pair from the installed package, as nobody"
done
INSIDE
echo "test-package: $(basename "$deb") installs into a clean Debian 12 and runs"
