#!/usr/bin/env bash
# Writes softverbs' manual pages, each from the one source a user also reads:
#   softverbs.1  the CLI's help texts (`softverbs help`, `softverbs help COMMAND`):
#                synopsis, description, one subsection per command, environment,
#                exit status;
#   softverbs.7  the devices (the user guide's first paragraph) and every
#                environment variable (its Environment section);
# dated with the release's line in CHANGELOG.md. The help and the guide stay
# the place to edit; the pages follow at the next build.
#
# Usage: packaging/man-pages.sh SOFTVERBS_CLI OUTPUT_DIR
set -euo pipefail

case ${1:-} in
  -h|--help) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
if (($# != 2)); then
  echo "man-pages: give the built CLI and the output folder, e.g. packaging/man-pages.sh build/harness/cli/softverbs build/man" >&2
  exit 2
fi
cli=$1 out=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
guide=$root/docs/user-guide.md
[[ -x $cli ]] || { echo "man-pages: $cli is not an executable CLI" >&2; exit 2; }
mkdir -p "$out"

version=$("$cli" --version | cut -d' ' -f2)
# "## 0.9.0 (2026-11-28)" in CHANGELOG.md dates the pages of that release.
date=$(sed -n "s/^## ${version//./\\.} (\([0-9-]*\)).*/\1/p" "$root/CHANGELOG.md" 2>/dev/null | head -1 || true)
header() { printf '.TH SOFTVERBS %s "%s" "softverbs %s" "softverbs"\n' "$1" "$date" "$version"; }

# Text to roff: backslashes and hyphens escaped (so options copy as typed),
# a leading dot or quote made literal.
roff_common='
function esc_char(c) {
  if (c == "\\") return "\\e"
  if (c == "-") return "\\-"
  return c
}
function esc(s,   out, i) {
  out = ""
  for (i = 1; i <= length(s); i++) out = out esc_char(substr(s, i, 1))
  return literal_start(out)
}
function literal_start(s) { return s ~ /^[.\047]/ ? "\\&" s : s }
function indent_of(s) { match(s, /^ */); return RLENGTH }
'

# A help text to roff. Paragraphs fill; "usage:" blocks, examples and
# indented lines without a description stay as typed; "  TAG  text" lines
# (options, variables, statuses) become tagged paragraphs, the deeper
# indented lines after them their continuation. With sections=1 (the
# general help) "label:" lines open sections (.SH) and the "commands:" list
# is replaced by the file commands_roff.
help_to_roff='
function close_block() {
  if (mode == "verbatim") { print ".fi"; if (shifted) print ".RE" }
  mode = ""; shifted = 0
}
function open_verbatim(shift) {
  close_block(); print ".PP"
  if (shift) print ".RS 4"
  print ".nf"; mode = "verbatim"; shifted = shift
}
function open_label(label) {
  close_block()
  if (sections) print ".SH " toupper(label)
  else { print ".PP"; print esc(toupper(substr(label, 1, 1)) substr(label, 2) ":") }
}
function entry(tag, text) {
  close_block(); print ".TP"; print "\\fB" esc(tag) "\\fR"
  if (text != "") print esc(text)
  mode = "entry"
}
{ line[NR] = $0 }
END {
  for (i = 1; i <= NR; i++) {
    s = line[i]
    if (s == "") { close_block(); in_label = ""; continue }
    indent = indent_of(s)
    if (skipping && indent > 0) continue
    skipping = 0
    if (indent == 0) {
      if (s ~ /^usage: /) {
        if (sections) { skipping = 1; continue }  # the page has its own SYNOPSIS
        open_verbatim(0); print esc(s); continue
      }
      if (s ~ /^[a-z][a-z ]*:$/) {
        in_label = substr(s, 1, length(s) - 1)
        if (sections && in_label == "commands") {
          close_block(); print ".SH COMMANDS"
          while ((getline roff < commands_roff) > 0) print roff
          skipping = 1; continue
        }
        open_label(in_label); continue
      }
      if (s ~ /^examples?: ./) {
        open_label(substr(s, 1, index(s, ":") - 1))
        open_verbatim(1); print esc(substr(s, index(s, ":") + 2)); continue
      }
      if (mode != "para") {
        close_block()
        if (sections && !described) print ".SH DESCRIPTION"
        print ".PP"; mode = "para"
      }
      described = 1
      print esc(s); continue
    }
    if (mode == "verbatim") { print esc(shifted && indent >= 2 ? substr(s, 3) : s); continue }
    if (indent == 2 && in_label !~ /^examples?$/) {
      body = substr(s, 3)
      if (match(body, /   */)) { entry(substr(body, 1, RSTART - 1), substr(body, RSTART + RLENGTH)); continue }
      if (i < NR && indent_of(line[i + 1]) > 2) { entry(body, ""); continue }
    }
    if (mode == "entry" && indent > 2) { print esc(substr(s, indent + 1)); continue }
    open_verbatim(1); print esc(substr(s, 3))
  }
  close_block()
}
'

# Markdown to roff, for the guide: `code` in bold, [text](link) as its text.
markdown_common='
function md(s,   out, i, c, rest, code) {
  out = ""; code = 0; i = 1
  while (i <= length(s)) {
    c = substr(s, i, 1)
    if (c == "`") { out = out (code ? "\\fR" : "\\fB"); code = !code; i++; continue }
    rest = substr(s, i)
    if (!code && c == "[" && match(rest, /^\[[^]]*\]\([^)]*\)/)) {
      # A section of the guide is named as one; a document by its text.
      out = out md(substr(rest, 2, index(rest, "]") - 2))
      if (substr(rest, index(rest, "]") + 2, 1) == "#") out = out " (user guide)"
      i += RLENGTH; continue
    }
    if (!code && substr(rest, 1, 2) == "**") { i += 2; continue }
    out = out esc_char(c); i++
  }
  return out
}
'

# The Environment section: each table row a tagged paragraph with its
# default, the paragraphs after the table as they are.
environment_to_roff='
/^## / { inside = ($0 == "## Environment"); next }
!inside { next }
/^\| *variable *\|/ || /^\|---/ { next }
/^\|/ {
  row = substr($0, 3, length($0) - 4)
  n = split(row, cell, / \| /)
  meaning = cell[2]
  for (k = 3; k < n; k++) meaning = meaning " | " cell[k]
  print ".TP"; print literal_start(md(cell[1]))
  print literal_start(md(meaning) "."); print "Default: " md(cell[n]) "."
  next
}
/^$/ { paragraph = 0; next }
{ if (!paragraph) { print ".PP"; paragraph = 1 }; print literal_start(md($0)) }
'

first_paragraph_to_roff='
NR == 1 { next }
/^$/ { if (started) exit; next }
{ started = 1; print literal_start(md($0)) }
'

# ---- softverbs.1

commands_roff=$(mktemp)
trap 'rm -f "$commands_roff"' EXIT
# The commands, in the order of the general help; those that share a help
# text (stats, fault, port, rnr) share a subsection.
mapfile -t commands < <("$cli" help | awk '/^commands:$/ { on = 1; next } on && /^$/ { exit }
  on && /^  [a-z]/ { print $1 }' | awk '$1 != "help" && !seen[$1]++')
declare -A title_of_text=()
declare -a texts=()
for command in "${commands[@]}"; do
  text=$("$cli" help "$command")
  if [[ -z ${title_of_text[$text]:-} ]]; then
    texts+=("$text")
    title_of_text[$text]="softverbs $command"
  else
    title_of_text[$text]+=", $command"
  fi
done
for text in "${texts[@]}"; do
  printf '.SS "%s"\n' "${title_of_text[$text]}"
  printf '%s\n' "$text" | awk "$roff_common$help_to_roff"
done >"$commands_roff"

{
  header 1
  echo ".SH NAME"
  echo 'softverbs \- run libibverbs and librdmacm programs on software RDMA devices'
  echo ".SH SYNOPSIS"
  echo '.B softverbs'
  echo '.I COMMAND'
  echo '.RI [ ARGS ...]'
  echo '.br'
  echo '.B softverbs help'
  echo '.RI [ COMMAND ]'
  echo '.br'
  echo '.B softverbs \-\-version'
  "$cli" help | awk -v sections=1 -v commands_roff="$commands_roff" "$roff_common$help_to_roff"
  echo ".SH SEE ALSO"
  echo '.BR softverbs (7),'
  echo '.BR ibv_devinfo (1),'
  echo '.BR ibv_rc_pingpong (1),'
  echo '.BR rdma_cm (7),'
  echo '/usr/share/doc/softverbs/'
} >"$out/softverbs.1"

# ---- softverbs.7

{
  header 7
  echo ".SH NAME"
  echo 'softverbs \- software RDMA devices for libibverbs and librdmacm programs, and their environment'
  echo ".SH DESCRIPTION"
  awk "$roff_common$markdown_common$first_paragraph_to_roff" "$guide"
  echo ".PP"
  echo 'Programs run on them with \fBsoftverbs run \-\- PROGRAM\fR (see \fBsoftverbs\fR(1)).'
  echo ".SH ENVIRONMENT"
  awk "$roff_common$markdown_common$environment_to_roff" "$guide"
  echo ".SH SEE ALSO"
  echo '.BR softverbs (1),'
  echo '.BR ibv_devices (1),'
  echo '.BR rdma_cm (7),'
  echo '/usr/share/doc/softverbs/docs/user-guide.md'
} >"$out/softverbs.7"

echo "$out/softverbs.1"
echo "$out/softverbs.7"
