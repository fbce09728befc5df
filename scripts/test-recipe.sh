#!/usr/bin/env bash
# Runs one CI recipe of docs/ci-recipes.md as it is written there, in a clean
# Debian 12 root file system (scripts/lib/clean-root.sh), on the example
# project docs/ci-example/ with the Debian package beside it (./ and ./ci/):
#   - the recipe is the code block after `<!-- recipe: NAME -->`: a GitHub
#     Actions or GitLab CI job (yaml: each `run:` step, each `before_script:`
#     and `script:` line), a Dockerfile (RUN, COPY [--chown], WORKDIR, USER,
#     CMD), or a shell session (each line; `sudo` ones as root);
#   - commands that install (apt-get, apt, dpkg, and Dockerfile steps before
#     USER) run as root, as a container job's first steps do; every other
#     command runs as user nobody, to show that building and testing on soft
#     devices needs no privilege;
#   - the recipe passes when every command succeeds and the project's test
#     ran on softverbs0 (its line in ctest's log).
# Needs root (debootstrap, chroot, mounts): otherwise it exits 77.
#
# Usage: scripts/test-recipe.sh [--print] NAME [PATH/TO/softverbs_VERSION_amd64.deb]
#   NAME: github_actions, gitlab_ci, container or laptop; without a package,
#   scripts/package.sh builds it first. --print shows the commands and who
#   would run them, and runs nothing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
recipes=$root/docs/ci-recipes.md
case ${1:-} in
  -h|--help|'') sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
print=0
[[ $1 == --print ]] && { print=1; shift; }
name=${1:?say which recipe: github_actions, gitlab_ci, container or laptop}
grep -q "^<!-- recipe: $name -->$" "$recipes" ||
  { echo "test-recipe: docs/ci-recipes.md has no recipe '$name' (<!-- recipe: $name -->)" >&2; exit 2; }
work=$(mktemp -d /var/tmp/softverbs-recipe-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/steps"

# ---- the recipe's commands, one file each: NNN.root, NNN.user or NNN.copy
awk -v name="$name" -v steps="$work/steps" '
function emit(who, text,   file) {
  file = sprintf("%s/%03d.%s", steps, ++count, who)
  if (who != "copy") printf "cd %s\n", workdir > file
  printf "%s\n", text > file
  close(file)
}
function installs(text) { return text ~ /^(sudo )?(apt-get|apt|dpkg) / }
function shell_step(text) {
  if (text ~ /^sudo /) emit("root", substr(text, 6))
  else emit(installs(text) ? "root" : "user", text)
}
function indent_of(s) { match(s, /^ */); return RLENGTH }
BEGIN { workdir = "/work/project"; as_user = 0 }
$0 == "<!-- recipe: " name " -->" { want = 1; next }
want && /^```/ { want = 0; inside = 1; kind = substr($0, 4); if (kind == "dockerfile") workdir = "/"; next }
!inside { next }
/^```$/ {
  if (collecting) shell_step(block)
  inside = 0; collecting = 0; block = ""; next
}
# yaml: each `run:` step (a `run: |` block is the lines indented deeper
# than its key) and each item of before_script: and script:
kind == "yaml" {
  if (collecting && (indent_of($0) > key_indent || $0 ~ /^ *$/)) {
    if (block_indent < 0) block_indent = indent_of($0)
    block = block (block == "" ? "" : "\n") substr($0, block_indent + 1); next
  }
  if (collecting) { shell_step(block); block = ""; collecting = 0 }
  if ($0 ~ /run: \|$/) { collecting = 1; key_indent = indent_of($0); block_indent = -1; next }
  if (match($0, /run: /)) { shell_step(substr($0, RSTART + 5)); next }
  if ($0 ~ /^ *[a-z_-]+:/) { in_script = ($0 ~ /^ *(before_script|script):/); next }
  if (in_script && match($0, /^ *- /)) { shell_step(substr($0, RLENGTH + 1)); next }
  next
}
kind == "dockerfile" {
  line = $0
  while (line ~ /\\$/ && (getline more) > 0) line = substr(line, 1, length(line) - 1) more
  if (line ~ /^RUN /) emit(as_user ? "user" : "root", substr(line, 5))
  else if (line ~ /^WORKDIR /) workdir = substr(line, 9)
  else if (line ~ /^USER /) as_user = 1
  else if (line ~ /^COPY /) {
    owner = "root"; rest = substr(line, 6)
    if (match(rest, /^--chown=[^ ]+ /)) { owner = substr(rest, 9, RLENGTH - 9); rest = substr(rest, RLENGTH + 1) }
    emit("copy", owner " " rest)
  } else if (line ~ /^CMD \[/) {
    command = substr(line, 6, length(line) - 6); gsub(/", "/, " ", command); gsub(/"/, "", command)
    emit(as_user ? "user" : "root", command)
  }
  next
}
# a shell session: one command a line, comments and continuations allowed
{
  line = $0
  while (line ~ /\\$/ && (getline more) > 0) line = substr(line, 1, length(line) - 1) "\n" more
  sub(/[ ]+#.*$/, "", line)
  if (line !~ /^[ ]*(#|$)/) shell_step(line)
}
' "$recipes"
count=$(ls "$work/steps" | wc -l)
((count > 0)) || { echo "test-recipe: the recipe '$name' has no command" >&2; exit 1; }
if ((print)); then
  for step in "$work/steps"/*; do
    case ${step##*.} in
      root) echo "--- as root:" ;;
      user) echo "--- as nobody:" ;;
      copy) echo "--- copied from the project (owner, source, destination):" ;;
    esac
    cat "$step"
  done
  exit 0
fi
source "$root/scripts/lib/clean-root.sh"
clean_root_prepare test-recipe "${2:-}"
deb=$clean_root_deb

# ---- the project, the package, the root
clean_root_copy "$work"
project=$work/root/work/project
mkdir -p "$project/ci"
cp "$root/docs/ci-example/CMakeLists.txt" "$root/docs/ci-example/rdma_loopback.c" "$project/"
cp "$deb" "$project/"
cp "$deb" "$project/ci/"
chown -R 65534:65534 "$project"

echo "test-recipe: $name: $count commands from docs/ci-recipes.md"
unshare --mount --propagation private bash -uo pipefail -s "$work/root" "$root" "$work/steps" <<'INSIDE'
new_root=$1 steps=$3
source "$2/scripts/lib/clean-root.sh"
clean_root_mount "$new_root"
environment=(env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin DEBIAN_FRONTEND=noninteractive)
for step in "$steps"/*; do
  who=${step##*.}
  echo "--- as ${who/user/nobody}: $(tail -n +2 "$step" | head -3)"
  cp "$step" "$new_root/tmp/recipe-step" && chmod 644 "$new_root/tmp/recipe-step"
  case $who in
    # An installer that asks gets a yes, as `-y` would have given it.
    root) chroot "$new_root" "${environment[@]}" HOME=/root bash -e /tmp/recipe-step < <(yes 2>/dev/null) ;;
    user) chroot --userspec=nobody:nogroup "$new_root" "${environment[@]}" HOME=/tmp bash -e /tmp/recipe-step </dev/null ;;
    copy)  # COPY [--chown=OWNER] SOURCE DESTINATION, from the project
      read -r owner source destination <"$step"
      target=$destination
      [[ $target == */ ]] && target=$target$(basename "$source")
      chroot "$new_root" sh -c "mkdir -p '$(dirname "$target")' && cp -a '/work/project/$source' '$target' && chown -R '$owner' '$target'" ;;
  esac
  status=$?
  if ((status != 0)); then echo "FAIL: the command above exited with $status"; exit 1; fi
done
INSIDE

# The project's test ran, on a soft device.
log=$(find "$work/root" -path '*/Testing/Temporary/LastTest.log' -newer "$work/steps" 2>/dev/null | head -1)
if [[ -z $log ]] || ! grep -q 'rdma_loopback: softverbs0 port 1 .* data checked' "$log"; then
  echo "FAIL: the project's test left no sign of a run on softverbs0 (ctest's LastTest.log)"
  exit 1
fi
echo "test-recipe: $name passes: $(grep -o 'rdma_loopback: softverbs0 .*' "$log" | tail -1)"
