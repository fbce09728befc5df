# Reads a ctest LastTest.log and prints, for each failed test, the lines
# that say why: GoogleTest failures with their messages, sanitizer reports
# and the shell suites' failed cases (a test killed by ctest's timeout
# shows none).
# A run's log is long; this is the part worth reading first. A failed test
# whose output has none of those lines (a load program's own verdict, a
# script's message) gets its last lines instead.
#
#   awk -f scripts/lib/failure-digest.awk BUILD/Testing/Temporary/LastTest.log

BEGIN { tail_size = 24 }

/^[0-9]+\/[0-9]+ Test: / {
  name = $3
  kept = 0
  n = 0
  follow = 0
  seen = 0
  ended = 1  # until its output starts
  next
}

/^Output:$/ && ended {
  ended = 0
  getline  # the rule under it
  next
}

/^<end of output>$/ {
  follow = 0
  ended = 1
  next
}

# Every line of a test's output goes into a ring of its last ones.
!ended {
  tail[seen++ % tail_size] = $0
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
  if (n > 0) next
  # Nothing recognised: the output's last lines.
  first = seen > tail_size ? seen - tail_size : 0
  print "    (no failure lines recognised; the output's last lines:)"
  for (i = first; i < seen; i++) print "    " tail[i % tail_size]
}
