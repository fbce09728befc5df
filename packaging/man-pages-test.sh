#!/usr/bin/env bash
# Checks the manual pages packaging/man-pages.sh writes from the CLI's help
# and the user guide: both format without a warning, softverbs(1) has a
# subsection for every command the general help lists and every option
# each command's help shows, softverbs(7) names every variable of the
# guide's Environment table, and man(1) shows them.
#
# Usage: packaging/man-pages-test.sh SOFTVERBS_CLI
set -uo pipefail

cli=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

bash "$here/man-pages.sh" "$cli" "$out" >/dev/null || { echo "FAIL: man-pages.sh"; exit 1; }
for page in softverbs.1 softverbs.7; do
  warnings=$(groff -k -man -Tutf8 -ww -z "$out/$page" 2>&1)
  [[ -z $warnings ]] || fail "$page formats with warnings: $warnings"
  text=$(MANWIDTH=200 man -l "$out/$page" 2>/dev/null | col -b)
  [[ $text == *"SOFTVERBS("*")"* ]] || fail "man -l $page shows no page"
  printf '%s\n' "$text" >"$out/$page.txt"
done

commands=$("$cli" help | awk '/^commands:$/ { on = 1; next } on && /^$/ { exit }
  on && /^  [a-z]/ && $1 != "help" { print $1 }' | sort -u)
[[ $(wc -l <<<"$commands") -ge 10 ]] || fail "found only $(wc -l <<<"$commands") commands in the help"
for command in $commands; do
  grep -Eq "^ +softverbs .*\b$command\b" "$out/softverbs.1.txt" ||
    fail "softverbs(1) has no subsection for '$command'"
  for option in $("$cli" help "$command" | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
    grep -qF -- "$option" "$out/softverbs.1.txt" || fail "softverbs(1) lacks $command's $option"
  done
done
for section in SYNOPSIS DESCRIPTION COMMANDS ENVIRONMENT "EXIT STATUS" "SEE ALSO"; do
  grep -q "^$section" "$out/softverbs.1.txt" || fail "softverbs(1) has no $section section"
done

variables=$(awk '/^## /{ on = ($0 == "## Environment") } on && /^\| `SOFTVERBS_/' "$root/docs/user-guide.md" |
  grep -oE 'SOFTVERBS_[A-Z0-9_]+' | sort -u)
[[ $(wc -l <<<"$variables") -ge 20 ]] || fail "found only $(wc -l <<<"$variables") variables in the guide"
for variable in $variables; do
  grep -qE "^ *(SOFTVERBS_[A-Z0-9_]+, )*$variable\b" "$out/softverbs.7.txt" || fail "softverbs(7) does not describe $variable"
done

echo "$(wc -l <<<"$commands") commands, $(wc -l <<<"$variables") variables; $failures failures"
((failures == 0))
