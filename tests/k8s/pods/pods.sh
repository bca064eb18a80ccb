#!/bin/sh
# pods.sh: the ctest entry point of deploy.k8s_pods (pods.mjs: the rendered
# base run as pods, without a cluster). Needs root (mount, PID and network
# namespaces, chroot), util-linux's unshare, nsenter and setpriv, node with
# tests/k8s's packages, and the built programs; skips (77) without them.
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
here=$(cd "$here/.." && pwd)
skip() { echo "k8s pods: skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (namespaces, chroot)"
for t in unshare nsenter setpriv chroot ip node; do
    command -v "$t" >/dev/null 2>&1 || skip "$t is not installed"
done
[ -d "$here/node_modules/yaml" ] || skip "$here/node_modules is absent (run: cd tests/k8s && npm ci)"
build=${CORRAL_BUILD_DIR:?}
for p in corral corral-gateway corral-scheduler corral-registry corral-runner corral-node corral-gguf-synth; do
    [ -x "$build/bin/$p" ] || skip "$build/bin/$p is not built"
done
unshare --net true 2>/dev/null || skip "cannot make a network namespace here"
# One network namespace for all the pods: private ports, loopback only.
exec unshare --net -- sh -c 'ip link set lo up && exec node "$0"' "$here/pods/pods.mjs"
