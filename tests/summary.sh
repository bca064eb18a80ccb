#!/usr/bin/env bash
# summary.sh: what one ctest run did, from its JUnit file (ctest
# --output-junit): how many tests ran, passed, failed and were skipped,
# every skipped test with the reason it printed, and every passing test
# that said it skipped a part (for example, no shared testdata). Under a
# failed test come the lines where it said what failed (check.h's "FAIL
# file:line", a sanitizer's "ERROR:"), so a CI log that keeps only its head
# and tail still shows them.
# Usage: tests/summary.sh JUNIT.xml TITLE
set -euo pipefail
xml=$1
title=$2
if [ ! -f "$xml" ]; then
    echo "== $title: no results ($xml is absent) =="
    exit 0
fi
awk -v title="$title" '
function unxml(s) {
    gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&quot;/, "\"", s)
    gsub(/&apos;/, "\047", s); gsub(/&amp;/, "\\&", s)
    return s
}
function attr(line, name,    m) {
    if (match(line, name "=\"[^\"]*\"")) {
        m = substr(line, RSTART + length(name) + 2, RLENGTH - length(name) - 3)
        return unxml(m)
    }
    return ""
}
# A line in which a test says it skipped something (log lines, which start
# with a timestamp, are not such sayings).
function says_skip(l) {
    if (l ~ /^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T/)
        return 0
    return l ~ /[Ss]kipped[:;]|[Ss]kipped$|[Ss]kipped \(|[Ss]kipping /
}
/<testcase / {
    name = attr($0, "name"); status = attr($0, "status")
    reason = ""; partial = ""; inout = 0; nsaid = 0; said = ""
    next
}
/<skipped / { if (reason == "") reason = attr($0, "message"); next }
/<system-out>/ {
    inout = 1
    sub(/.*<system-out>/, "")
}
inout {
    line = $0
    done = sub(/<\/system-out>.*/, "", line)
    line = unxml(line)
    if (says_skip(line)) {
        if (status == "notrun") reason = line
        else if (partial == "") partial = line
    }
    if (status == "fail" && nsaid < 8 && line ~ /^FAIL |ERROR: |runtime error: /)
        { said = said "\n      " line; nsaid++ }
    if (done) inout = 0
    next
}
/<\/testcase>/ {
    total++
    if (status == "run") {
        passed++
        if (partial != "") parts[++np] = name ": " partial
    } else if (status == "notrun") {
        skipped++; skips[++ns] = name ": " reason
    } else {
        failed++; fails[++nf] = name said
    }
}
END {
    printf "== %s: %d tests: %d passed, %d failed, %d skipped ==\n", title, total,
        passed, failed, skipped
    for (i = 1; i <= ns; i++) print "  skipped   " skips[i]
    for (i = 1; i <= nf; i++) print "  FAILED    " fails[i]
    for (i = 1; i <= np; i++) print "  passed, but skipped a part: " parts[i]
}' "$xml"
