#!/bin/sh
# docker_check.sh: the checks of deploy/docker that need no engine. The
# build stage is mirrored here: this build is installed the way the
# Dockerfiles' build stage installs it (DESTDIR=/out, prefix /usr/local,
# component runtime) and runtime-deps.sh writes runtime-packages.txt beside
# it; then every COPY source, CMD and HEALTHCHECK program of both
# Dockerfiles, and compose.yaml and compose.cpu.yaml, are checked against
# that tree (corral-deploy-check).
set -u
src=${CORRAL_SOURCE_DIR:?}
build=${CORRAL_BUILD_DIR:?}
check=${CORRAL_DEPLOY_CHECK:?}
tmp=$(mktemp -d /tmp/corral-docker-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
pass=0
step() { # name, command...
    name=$1
    shift
    if "$@"; then
        pass=$((pass + 1))
    else
        echo "docker_check: FAILED: $name"
        fail=$((fail + 1))
    fi
}

step "install like the build stage" env DESTDIR="$tmp/out" \
    cmake --install "$build" --component runtime --prefix /usr/local
bin="$tmp/out/usr/local/bin"
for p in corral corral-gateway corral-scheduler corral-registry corral-runner corral-node; do
    step "$p installed" test -x "$bin/$p"
done

# runtime-deps.sh as the build stage runs it: every package it names must
# be a real, installed package, and the bus library must be among them.
if command -v dpkg >/dev/null 2>&1; then
    step "runtime-deps.sh" sh -c \
        "sh '$src/deploy/docker/runtime-deps.sh' '$bin' >'$tmp/out/runtime-packages.txt'"
    # shellcheck disable=SC2046
    dpkg-query -W -f='${Package} ${Status}\n' \
        $(cat "$tmp/out/runtime-packages.txt") >"$tmp/status" 2>&1
    for p in $(cat "$tmp/out/runtime-packages.txt"); do
        step "package $p installed" grep -q "^$p install ok installed$" "$tmp/status"
    done
    step "runtime-deps names libzmq5" grep -qx libzmq5 "$tmp/out/runtime-packages.txt"
else
    echo "docker_check: no dpkg here; runtime-deps.sh not run"
    : >"$tmp/out/runtime-packages.txt"
fi

# Dockerfile.cuda's `cuda` stage installs the module into the same layout
# (component cuda); lib/corral exists in every install.
step "lib/corral installed" test -d "$tmp/out/usr/local/lib/corral"
step "Dockerfiles" "$check" dockerfile --context "$src" \
    --stage-dir "build:/out=$tmp/out" --stage-dir "cuda:/out=$tmp/out" \
    "$src/deploy/docker/Dockerfile" "$src/deploy/docker/Dockerfile.cuda"
step "compose.yaml" "$check" compose --services "$src/deploy/services.txt" \
    --stage-dir "build:/out=$tmp/out" --stage-dir "cuda:/out=$tmp/out" \
    "$src/deploy/docker/compose.yaml"
step "compose.cpu.yaml" "$check" compose --override \
    --services "$src/deploy/services.txt" \
    --stage-dir "build:/out=$tmp/out" --stage-dir "cuda:/out=$tmp/out" \
    "$src/deploy/docker/compose.cpu.yaml"
step "healthcheck usage" sh -c \
    "sh '$src/deploy/docker/healthcheck.sh' bogus 2>/dev/null; test \$? -eq 2"
step "healthcheck, no socket" sh -c \
    "! sh '$src/deploy/docker/healthcheck.sh' ipc '$tmp/none.sock' 2>/dev/null"
echo "docker_check: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
