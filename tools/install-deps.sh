#!/usr/bin/env bash
# install-deps.sh: installs from Debian's packages what corral needs, and
# only what is missing.
#
#   tools/install-deps.sh          what the build needs (and `corral pull`'s
#                                  CA certificates)
#   tools/install-deps.sh --test   that, plus what the test suite uses:
#                                  docker-registry (the OCI peer of the pull
#                                  tests), systemd-analyze (the unit file
#                                  checks), curl, chromium (the web
#                                  console's browser test), openssl (the
#                                  HTTPS test), clang 14 with its
#                                  libFuzzer runtime (the fuzz harnesses of
#                                  tests/fuzz), Node.js with npm (only
#                                  when no npm is on PATH) and the npm
#                                  packages of the client suite
#                                  (tests/clients) and of the Kubernetes
#                                  manifest tests (tests/k8s)
#
# As root it calls apt-get itself; as another user it calls sudo, and says
# what to do when there is no sudo. Nothing is installed when nothing is
# missing, so running it again costs a second.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

build_pkgs=(build-essential cmake pkg-config ca-certificates libzmq3-dev libczmq-dev
            libmsgpack-dev libmicrohttpd-dev libcurl4-openssl-dev libssl-dev libjansson-dev
            libedit-dev libjpeg62-turbo-dev libpng-dev libwebp-dev)
test_pkgs=(docker-registry systemd curl chromium openssl clang-14 libclang-rt-14-dev)

want_test=false
case "${1:-}" in
--test) want_test=true ;;
"") ;;
*) echo "usage: $0 [--test]" >&2; exit 2 ;;
esac

pkgs=("${build_pkgs[@]}")
if $want_test; then
    pkgs+=("${test_pkgs[@]}")
    # The image may bring its own Node; Debian's is used only when there is none.
    command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: not a Debian-like system (no dpkg-query/apt-get); install the" \
         "equivalents of: ${pkgs[*]}" >&2
else
    missing=()
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    if ((${#missing[@]})); then
        as_root=()
        if [ "$(id -u)" != 0 ]; then
            if ! command -v sudo >/dev/null 2>&1; then
                echo "install-deps: these Debian packages are missing and installing them" \
                     "needs root (there is no sudo): ${missing[*]}" >&2
                echo "install-deps: run as root: apt-get install ${missing[*]}" >&2
                exit 1
            fi
            as_root=(sudo)
        fi
        echo "install-deps: installing ${missing[*]}"
        "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
fi

# The npm packages of the client suite (the official ollama and openai
# libraries) and of the Kubernetes manifest tests (kubernetes-models,
# yaml), each installed again only when its package-lock.json changed.
if $want_test; then
    for dir in "$root/tests/clients" "$root/tests/k8s"; do
        if [ ! -f "$dir/node_modules/.package-lock.json" ] ||
           [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
            echo "install-deps: npm ci in ${dir#"$root"/}"
            (cd "$dir" && npm ci --no-audit --no-fund >/dev/null)
        fi
    done
fi
