#!/usr/bin/env python3
"""Writes docs/conformance.md from GoogleTest output: every test of the
conformance suites, and how it ended on each device it was run on.

  conformance_matrix.py --column softverbs=LOG[,LOG...] --column rxe=LOG[,LOG...]
                        [--crashed rxe=TEST,...] [--notes conformance/deviations.tsv]
                        [--source "how the logs were made"] > docs/conformance.md

A LOG is a suite's plain output (what it prints without --gtest_brief).
Several logs of one column are the parts of one run: two binaries, tests
rerun in the configuration they need (a test that ran beats its skip), or a
run resumed after a test took the kernel down. The notes file says, per test
and column, why a device deviates; the results themselves come only from
the logs.
"""
import argparse
import collections
import re
import sys

RESULT = re.compile(r"^\[\s+(OK|FAILED|SKIPPED)\s+\] (\S+\.\S+) \(\d+ ms\)")
START = re.compile(r"^\[ RUN\s+\] (\S+\.\S+)")

Outcome = collections.namedtuple("Outcome", "status detail")
RANK = {"unfinished": 0, "skipped": 1, "ok": 2, "failed": 2}


def parse_log(path):
    """{test: Outcome} from one log; a test started and never ended is
    'unfinished' (the process or the kernel under it died)."""
    outcomes = {}
    current, lines = None, []
    with open(path, errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            started = START.match(line)
            if started:
                current, lines = started.group(1), []
                continue
            ended = RESULT.match(line)
            if ended and current == ended.group(2):
                outcomes[current] = Outcome(ended.group(1).lower(), summarize(ended.group(1), lines))
                current = None
                continue
            if current and not line.startswith("[  "):
                lines.append(line)
    if current:
        outcomes[current] = Outcome("unfinished", "")
    return outcomes


def summarize(status, lines):
    """A skip's reason, or the first assertion of a failure, on one line."""
    text = [l.strip() for l in lines if l.strip() and not re.match(r"^\[\s*\d+\.\d+\]", l)]
    if status == "SKIPPED":
        return text[-1] if text else ""
    if status != "FAILED":
        return ""
    start = next((i + 1 for i, l in enumerate(text) if "Failure" in l), 0)
    assertion = []
    for l in text[start:]:
        if l.startswith("/") or l.startswith("Google Test trace"):
            break  # the next failure, or where this one came from
        assertion.append(l)
    return re.sub(r"\s+", " ", " ".join(assertion))[:240]


def read_notes(path):
    notes = {}
    if not path:
        return notes
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            test, column, text = line.rstrip("\n").split("\t", 2)
            notes[(test, column)] = text
    return notes


def cell(outcome, note):
    if outcome is None:
        return "—"
    word = {"ok": "pass", "failed": "**FAIL**", "skipped": "skip",
            "unfinished": "**did not finish**", "crashed": "**crashed the kernel**"}[outcome.status]
    detail = note or outcome.detail
    if detail and outcome.status != "ok":
        word += ": " + detail.replace("|", "\\|")
    elif note:
        word += " (" + note.replace("|", "\\|") + ")"
    return word


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--column", action="append", required=True, help="NAME=LOG[,LOG...]")
    parser.add_argument("--crashed", action="append", default=[], help="NAME=TEST[,TEST...]")
    parser.add_argument("--notes")
    parser.add_argument("--source", default="")
    args = parser.parse_args()

    columns, results = [], {}
    for spec in args.column:
        name, logs = spec.split("=", 1)
        columns.append(name)
        merged = {}
        for log in logs.split(","):
            for test, outcome in parse_log(log).items():
                # A test that ran beats one that skipped (another part ran
                # it in the configuration it needs), and either beats one
                # left unfinished (the run resumed past it); between equals
                # the later log (a part run since) wins.
                if test not in merged or RANK[outcome.status] >= RANK[merged[test].status]:
                    merged[test] = outcome
        results[name] = merged
    for spec in args.crashed:
        name, tests = spec.split("=", 1)
        for test in filter(None, tests.split(",")):
            results[name][test] = Outcome("crashed", "")
    notes = read_notes(args.notes)

    # The rows are the suite as the first column ran it: a test that only an
    # older run of another column knows (renamed or removed since) is not.
    suite = set(results[columns[0]])
    for name in columns[1:]:
        results[name] = {t: o for t, o in results[name].items() if t in suite}
    tests = sorted(suite)
    out = sys.stdout
    out.write("# Conformance matrix\n\n")
    out.write("Generated by `scripts/conformance-matrix.sh` from the runs' output; do not edit by hand.\n")
    out.write("Why a device deviates comes from `conformance/deviations.tsv`.\n\n")
    if args.source:
        out.write(args.source.strip() + "\n\n")
    out.write("| column | pass | fail | skip | other |\n|---|---|---|---|---|\n")
    for name in columns:
        counts = collections.Counter(o.status for o in results[name].values())
        other = len(results[name]) - counts["ok"] - counts["failed"] - counts["skipped"]
        out.write(f"| {name} | {counts['ok']} | {counts['failed']} | {counts['skipped']} | {other} |\n")
    if not any(name.startswith("mlx5") for name in columns):
        out.write("\nmlx5: no run yet (no HCA on the machines this was generated on; a run on one "
                  "joins as a column through `CONFORMANCE_HCA_LOGS`, see "
                  "`scripts/conformance-matrix.sh`).\n")
    out.write("\n")
    out.write("| test | " + " | ".join(columns) + " |\n")
    out.write("|---|" + "---|" * len(columns) + "\n")
    for test in tests:
        row = [cell(results[name].get(test), notes.get((test, name))) for name in columns]
        out.write(f"| `{test}` | " + " | ".join(row) + " |\n")


if __name__ == "__main__":
    main()
