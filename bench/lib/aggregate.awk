# Reduces the bench's samples (ROUND, ID, METRIC, VALUE; see measure.sh) to
# one line per ID and METRIC:
#   ID  METRIC  N  MEDIAN  MIN  MAX  TEXT
# where TEXT is "median [min–max]" formatted for a table (just the median
# when there is one sample), and one line per ID that failed at least once:
#   ID  error  COUNT  FIRST_REASON
BEGIN { FS = OFS = "\t" }

# About three significant digits, whole numbers as they are, never an
# exponent.
function fmt(v,    a, digits) {
  a = v < 0 ? -v : v
  if (v == int(v)) return sprintf("%d", v)
  if (a >= 100) return sprintf("%.0f", v)
  if (a >= 10) return sprintf("%.1f", v)
  if (a >= 1) return sprintf("%.2f", v)
  digits = int(-log(a) / log(10)) + 3
  return sprintf("%." digits "f", v)
}

function spread_text(median, low, high, n) {
  if (n < 2) return fmt(median)
  return fmt(median) " [" fmt(low) "–" fmt(high) "]"
}

# The run's own facts (command, start and end) are not figures.
$2 == "run" { next }

$3 == "error" {
  failures[$2]++
  if (!($2 in reason)) reason[$2] = $4
  next
}

$4 != "" {
  key = $2 SUBSEP $3
  count[key]++
  value[key, count[key]] = $4 + 0
}

END {
  for (key in count) {
    n = count[key]
    # Insertion sort: mawk has no asort, and n is the number of rounds.
    for (i = 1; i <= n; i++) sorted[i] = value[key, i]
    for (i = 2; i <= n; i++) {
      v = sorted[i]
      for (j = i - 1; j >= 1 && sorted[j] > v; j--) sorted[j + 1] = sorted[j]
      sorted[j + 1] = v
    }
    median = n % 2 ? sorted[(n + 1) / 2] : (sorted[n / 2] + sorted[n / 2 + 1]) / 2
    split(key, part, SUBSEP)
    print part[1], part[2], n, median, sorted[1], sorted[n], spread_text(median, sorted[1], sorted[n], n)
  }
  for (id in failures) print id, "error", failures[id], reason[id]
}
