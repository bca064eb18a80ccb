#!/bin/sh
# run.sh: the ctest entry point of tests/k8s (deploy.k8s). Skips (exit 77)
# when node or the installed packages are missing; otherwise node's test
# runner runs tests/*.test.mjs, which render deploy/k8s and check it.
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
here=$(cd "$here" && pwd)
if ! command -v node >/dev/null 2>&1; then
    echo "k8s: skipped: node is not installed"
    exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 18 ]; then
    echo "k8s: skipped: node $(node --version) is older than 18"
    exit 77
fi
if [ ! -d "$here/node_modules/kubernetes-models" ] || [ ! -d "$here/node_modules/yaml" ]; then
    echo "k8s: skipped: $here/node_modules is absent (run: cd tests/k8s && npm ci)"
    exit 77
fi
cd "$here" && exec node --test tests/
