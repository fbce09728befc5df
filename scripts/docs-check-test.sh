#!/usr/bin/env bash
# The docs check catches what it is for: in a copy of the repository whose
# user guide names a subcommand, a flag, a variable and a script that do not
# exist, and that lost the row of a variable softverbs reads, it fails and
# names each of them; on the unchanged copy it passes.
#
# Usage: scripts/docs-check-test.sh SOFTVERBS_CLI
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cli=${1:?usage: docs-check-test.sh SOFTVERBS_CLI}
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT

# The documents copied (they are changed), everything else linked.
for entry in "$root"/* "$root"/.ci; do
  name=$(basename "$entry")
  [[ $name == build* ]] && continue
  if [[ $name == docs || $name == README.md ]]; then cp -r "$entry" "$copy/"; else ln -s "$entry" "$copy/$name"; fi
done

failures=0
fail() {
  echo "FAIL: $1"
  failures=$((failures + 1))
}

if ! output=$(bash "$root/scripts/docs-check.sh" "$copy" "$cli" 2>&1); then
  fail "the unchanged copy does not pass:"
  echo "$output"
fi

guide="$copy/docs/user-guide.md"
# Spelt in two pieces here, or this script would be what reads it.
no_such_variable="SOFTVERBS_""NO_SUCH_VARIABLE"
cat >>"$guide" <<TEXT

\`softverbs frobnicate --pid 1\`, \`softverbs stats --everything\`,
\`$no_such_variable=1\`, \`scripts/no-such-script.sh\`, [a link](no-such-file.md)
TEXT
sed -i 's/SOFTVERBS_PROGRESS_SPIN_US/SOFTVERBS_PROGRESS_SPIN/g' "$copy"/docs/*.md "$copy/README.md"

output=$(bash "$root/scripts/docs-check.sh" "$copy" "$cli" 2>&1)
status=$?
((status == 1)) || fail "the check exited $status on the broken copy, not 1"
for expected in "'softverbs frobnicate' is no subcommand" \
                "--everything is not among the flags" \
                "names $no_such_variable, which nothing" \
                "names scripts/no-such-script.sh, which does not exist" \
                "links to no-such-file.md, which does not exist" \
                "SOFTVERBS_PROGRESS_SPIN_US is read by softverbs but named in no document"; do
  grep -qF -- "$expected" <<<"$output" || fail "not reported: $expected"
done
if ((failures)); then
  echo "--- the check said:"
  echo "$output"
  exit 1
fi
echo "docs-check-test: the check passes on the tree and reports each of 6 planted mistakes"
