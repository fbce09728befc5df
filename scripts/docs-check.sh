#!/usr/bin/env bash
# Checks that the documentation names only what exists, and documents what
# a user can set:
#   - every SOFTVERBS_* variable the product reads (emulator/, provider/,
#     harness/cli/) is named in README.md or docs/;
#   - every SOFTVERBS_* variable the documentation names is read or set
#     somewhere in the repository (code, scripts, CMake);
#   - every `softverbs SUB` the documentation shows is a subcommand, every
#     subcommand is in the user guide's CLI section, and every --flag shown
#     after `softverbs SUB` is one that `softverbs SUB --help` lists;
#   - every repository path the documentation names (scripts/..., docs/...,
#     bench/... and the other top-level folders) and every relative
#     Markdown link points at a file or folder that exists.
# Prints one line per problem (file:line: what is wrong) and exits 1 if
# there is any, 0 otherwise.
#
# Usage: scripts/docs-check.sh [ROOT] [SOFTVERBS_CLI]
#   ROOT           the repository (default: this script's parent folder)
#   SOFTVERBS_CLI  the built CLI (default: ROOT/build/harness/cli/softverbs)
set -uo pipefail

root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cli=${2:-$root/build/harness/cli/softverbs}
if [[ ! -x $cli ]]; then
  echo "docs-check: $cli is not built; run: bash scripts/build.sh (or name the CLI as the second argument)" >&2
  exit 2
fi
cli=$(realpath "$cli")
cd "$root" || exit 2

# The documents: README.md, docs/, and the READMEs of the folders.
mapfile -t documents < <(ls README.md CHANGELOG.md docs/*.md */README.md conformance/*/README.md 2>/dev/null | sort -u)

# Code, scripts and build files: where a variable can be read or set.
mapfile -t sources < <(git ls-files 2>/dev/null | grep -E '\.(cc|h|c|sh|awk|cmake|py)$|CMakeLists\.txt$|^\.ci/' ||
  find -L . -type f \( -name '*.cc' -o -name '*.h' -o -name '*.c' -o -name '*.sh' -o -name 'CMakeLists.txt' \) -not -path './build*')

# ---- environment variables

check_variables() {
  local product documented known
  product=$(grep -rhoE '"SOFTVERBS_[A-Z0-9_]*[A-Z0-9]"' emulator provider harness/cli \
    --include='*.cc' --include='*.h' --include='*.c' --exclude='*_test.cc' | tr -d '"' | sort -u)
  # Named whole, or as a list that abbreviates the rest of a family:
  # `SOFTVERBS_MAX_PD`, `_CQ`, ...
  documented=$(cat "${documents[@]}" | awk '
    { line = $0
      while (match(line, /SOFTVERBS_[A-Z0-9_]*[A-Z0-9]/)) {
        name = substr(line, RSTART, RLENGTH); print name
        family = name; sub(/_[A-Z0-9]+$/, "", family)
        line = substr(line, RSTART + RLENGTH)
        while (match(line, /^`?, (and )?`_[A-Z0-9]+`/)) {
          part = substr(line, RSTART, RLENGTH); sub(/^[^_]*/, "", part); gsub(/`/, "", part)
          print family part
          line = substr(line, RSTART + RLENGTH)
        }
      }
    }' | sort -u)
  for variable in $product; do
    grep -qx "$variable" <<<"$documented" ||
      echo "environment: $variable is read by softverbs but named in no document (docs/user-guide.md lists them)"
  done
  known=$(cat "${sources[@]}" 2>/dev/null | grep -oE 'SOFTVERBS_[A-Z0-9_]*[A-Z0-9]' | sort -u)
  for document in "${documents[@]}"; do
    grep -noE 'SOFTVERBS_[A-Z0-9_]*[A-Z0-9]' "$document" | while IFS=: read -r line variable; do
      grep -qx "$variable" <<<"$known" ||
        echo "$document:$line: names $variable, which nothing in the repository reads or sets"
    done
  done
}

# ---- the CLI

subcommands=$("$cli" --help 2>&1 | awk '/^commands:/ { on = 1; next } /^[a-z]/ { on = 0 }
  on && /^  [a-z]/ { print $1 }' | sort -u)

check_subcommands() {
  [[ -n $subcommands ]] || echo "cli: '$cli --help' lists no commands under 'commands:'"
  for sub in $subcommands; do
    grep -qE "softverbs $sub( |\`|$)" docs/user-guide.md ||
      echo "docs/user-guide.md: the subcommand '$sub' is not shown (as 'softverbs $sub ...')"
  done
}

# The --flags `softverbs SUB --help` shows, --[no-]x as --x and --no-x,
# taken once for every subcommand (the checks below run in subshells).
declare -A help_of=()
for sub in $subcommands; do
  help_of[$sub]=" $("$cli" "$sub" --help 2>&1 | grep -oE -- '--(\[no-\])?[a-z][a-z0-9-]*' |
    sed -E 's/^--\[no-\](.*)$/--\1\n--no-\1/' | sort -u | tr '\n' ' ')"
done

# Commands shown in code: inline code spans and fenced blocks.
check_commands() {
  local document=$1
  awk '
    /^ *```/ { fenced = !fenced; next }
    fenced { print FNR "\t" $0; next }
    {
      line = $0
      while (match(line, /`[^`]+`/)) {
        print FNR "\t" substr(line, RSTART + 1, RLENGTH - 2)
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$document" |
    grep -E 'softverbs [a-z-]' | while IFS=$'\t' read -r line text; do
      # Each command of the text (split at |, ;, &&) whose first word,
      # after variable assignments, sudo, env and a prompt, is the CLI.
      sed -E 's/(\|\||&&|[|;])/\n/g' <<<"$text" | while read -r -a words; do
        local i=0
        while ((i < ${#words[@]})) && [[ ${words[i]} =~ ^([$#]|sudo|env|[A-Za-z_][A-Za-z0-9_]*=.*)$ ]]; do
          i=$((i + 1))
        done
        ((i < ${#words[@]})) && [[ ${words[i]##*/} == softverbs ]] || continue
        local sub=${words[i + 1]:-}
        [[ -z $sub || $sub =~ ^(help|--help|-h|--version)$ ]] && continue
        if [[ -z ${help_of[$sub]+set} ]]; then
          echo "$document:$line: 'softverbs $sub' is no subcommand (softverbs --help lists them)"
          continue
        fi
        local flags=${help_of[$sub]}
        for word in "${words[@]:i+2}"; do
          [[ $word == -- ]] && break  # the program's own arguments follow
          [[ $word =~ ^--[a-z][a-z0-9-]*$ ]] || continue
          [[ " $flags " == *" $word "* || $word == --help ]] ||
            echo "$document:$line: 'softverbs $sub $word': $word is not among the flags 'softverbs $sub --help' shows"
        done
      done
    done
}

# ---- paths

check_paths() {
  local document=$1 dir
  dir=$(dirname "$document")
  # Repository paths in code spans: top-level folders of this repository.
  grep -noE '`(\.ci|bench|conformance|docs|emulator|harness|packaging|provider|scripts|debian)/[A-Za-z0-9_./+-]*`' "$document" |
    while IFS=: read -r line path; do
      path=${path//\`/}
      path=${path%%:*}
      [[ $path == *'*'* ]] && continue
      # A program is named by its path, its source beside it.
      [[ -e $path || -e $dir/$path || -e $path.cc || -e $path.sh ]] ||
        echo "$document:$line: names $path, which does not exist"
    done
  # Relative Markdown links.
  grep -noE '\]\([^)#[:space:]]+(#[^)]*)?\)' "$document" | while IFS=: read -r line link; do
    link=${link#](}
    link=${link%)}
    link=${link%%#*}
    [[ -z $link || $link == *://* || $link == mailto:* ]] && continue
    [[ -e $dir/$link ]] || echo "$document:$line: links to $link, which does not exist"
  done
}

findings=$(
  check_variables
  check_subcommands
  for document in "${documents[@]}"; do
    check_commands "$document"
    check_paths "$document"
  done
)
if [[ -n $findings ]]; then
  echo "$findings"
  echo "docs-check: $(wc -l <<<"$findings") problem(s)"
  exit 1
fi
echo "docs-check: ${#documents[@]} documents agree with the code"
