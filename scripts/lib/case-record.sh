# shellcheck shell=bash
# The bookkeeping of a shell test made of named cases. Source this file.
#
#   record NAME yes|no    prints "ok    NAME" or "FAIL  NAME" and counts it
#   report_cases          prints the totals and the failed names; its status
#                         is 0 only when every case passed

passed=0
failed=()

record() {
  if [[ $2 == yes ]]; then
    passed=$((passed + 1))
    echo "ok    $1"
  else
    failed+=("$1")
    echo "FAIL  $1"
  fi
}

report_cases() {
  echo
  echo "$passed passed, ${#failed[@]} failed"
  ((${#failed[@]} == 0)) || { printf 'failed: %s\n' "${failed[@]}"; return 1; }
}
