#!/bin/sh
# unit_exec.sh: installs this build with `cmake --install` into a DESTDIR
# (prefix /opt/corral, so the units' ExecStart= must follow --prefix),
# checks what the install put in place, then runs test_unit_exec on the
# installed units and programs.
set -u
src=${CORRAL_SOURCE_DIR:?}
build=${CORRAL_BUILD_DIR:?}
tmp=$(mktemp -d /tmp/corral-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
prefix=/opt/corral
if ! DESTDIR="$root" cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log"
    echo "unit_exec: cmake --install failed"
    exit 1
fi
missing=0
for f in bin/corral bin/corral-gateway bin/corral-scheduler bin/corral-registry \
         bin/corral-runner bin/corral-node lib/systemd/system/corral.target \
         lib/systemd/system/corral-gateway.service \
         lib/systemd/system/corral-scheduler.service \
         lib/systemd/system/corral-registry.service \
         lib/systemd/system/corral-node.service share/corral/node.env \
         lib/sysusers.d/corral.conf share/corral/corral.env \
         share/doc/corral/deploy.md; do
    if [ ! -e "$root$prefix/$f" ]; then
        echo "unit_exec: cmake --install did not install $prefix/$f"
        missing=1
    fi
done
if grep -q "@CORRAL_BINDIR@" "$root$prefix"/lib/systemd/system/*.service; then
    echo "unit_exec: an installed unit still says @CORRAL_BINDIR@"
    missing=1
fi
[ "$missing" -eq 0 ] || exit 1
"${CORRAL_UNIT_EXEC:?}" --root "$root" --prefix "$prefix" \
    --unitdir "$prefix/lib/systemd/system" \
    --services "$src/deploy/services.txt" \
    --env-file "$src/deploy/systemd/corral.env" \
    --healthcheck "$src/deploy/docker/healthcheck.sh"
