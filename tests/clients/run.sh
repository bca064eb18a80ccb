#!/bin/sh
# run.sh: the ctest entry point of the client suite. Skips (exit 77) when
# node or the installed packages are missing; otherwise run.mjs starts a
# private corral and runs tests/*.test.mjs against it.
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
here=$(cd "$here" && pwd)
if ! command -v node >/dev/null 2>&1; then
    echo "clients: skipped: node is not installed"
    exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 18 ]; then
    echo "clients: skipped: node $(node --version) is older than 18"
    exit 77
fi
if [ ! -d "$here/node_modules" ]; then
    echo "clients: skipped: $here/node_modules is absent (run: cd tests/clients && npm ci)"
    exit 77
fi
exec node "$here/run.mjs"
