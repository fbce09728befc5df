# Reads a ctest LastTest.log and prints, for each failed test, the lines
# that say why: GoogleTest failures with their messages, sanitizer reports
# and the shell suites' failed cases (a test killed by ctest's timeout
# shows none).
# A run's log is long; this is the part worth reading first.
#
#   awk -f scripts/lib/failure-digest.awk BUILD/Testing/Temporary/LastTest.log

/^[0-9]+\/[0-9]+ Test: / {
  name = $3
  kept = 0
  n = 0
  follow = 0
  next
}

/^<end of output>$/ {
  follow = 0
  next
}

# Inside a test's output: keep what explains a failure, with a few lines of
# context after a GoogleTest failure or a sanitizer's headline.
{
  if (follow > 0) {
    lines[++n] = "    " $0
    follow--
    # A hung peer's threads, printed before it was killed: all of them.
    if ($0 ~ /its threads were:$/) follow = 100
    next
  }
  if ($0 ~ /: Failure$/ || $0 ~ /ERROR: (Address|Leak|UndefinedBehavior)Sanitizer/ ||
      $0 ~ /WARNING: ThreadSanitizer/ || $0 ~ /runtime error:/) {
    lines[++n] = "    " $0
    follow = 8
    next
  }
  if ($0 ~ /^\[  FAILED  \] .*\(/ || $0 ~ /^FAIL  / || $0 ~ /^failed: /) {
    lines[++n] = "    " $0
    next
  }
  # The shell suites' own failed cases, followed by the logs they print.
  if ($0 ~ /^FAILED: /) {
    lines[++n] = "    " $0
    follow = 12
    next
  }
}

/^Test Failed/ {
  if (kept) next
  kept = 1
  print "--- " name
  limit = n < 160 ? n : 160
  for (i = 1; i <= limit; i++) print lines[i]
  if (n > limit) print "    ... (" n - limit " more lines in the log)"
  if (n == 0) print "    (no failure lines found; see the test's output above)"
}
