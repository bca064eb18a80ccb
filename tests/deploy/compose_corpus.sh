#!/bin/sh
# compose_corpus.sh: the deploy checks must catch what breaks a deployment.
# Each case edits a copy of the real compose.yaml or Dockerfile (one sed
# expression; GNU sed's 0,/re/ form edits the first match only) and expects
# corral-deploy-check to fail with a message containing the given words.
# A case whose edit changes nothing fails too, so the corpus follows the
# files it mutates.
set -u
src=${CORRAL_SOURCE_DIR:?}
build=${CORRAL_BUILD_DIR:?}
check=${CORRAL_DEPLOY_CHECK:?}
tmp=$(mktemp -d /tmp/corral-corpus-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if ! DESTDIR="$tmp/out" cmake --install "$build" --component runtime \
        --prefix /usr/local >/dev/null 2>&1; then
    echo "compose_corpus: cmake --install failed"
    exit 1
fi
: >"$tmp/out/runtime-packages.txt"
docker="$src/deploy/docker"
pass=0
fail=0

# case NAME KIND SED EXPECTED: KIND is compose or dockerfile.
case_() {
    name=$1 kind=$2 expr=$3 want=$4
    if [ "$kind" = compose ]; then
        orig="$docker/compose.yaml"
        file="$tmp/compose.yaml"
        # The copy lives elsewhere: point its build contexts at the repo.
        sed -e "s|context: \.\./\.\.|context: $src|" "$orig" >"$tmp/base"
    else
        orig="$docker/Dockerfile"
        file="$tmp/Dockerfile"
        cp "$orig" "$tmp/base"
        cp "$docker/Dockerfile.dockerignore" "$tmp/Dockerfile.dockerignore"
    fi
    sed -e "$expr" "$tmp/base" >"$file"
    if cmp -s "$tmp/base" "$file"; then
        echo "FAIL $name: the edit '$expr' changed nothing"
        fail=$((fail + 1))
        return
    fi
    if [ "$kind" = compose ]; then
        "$check" compose --services "$src/deploy/services.txt" \
            --stage-dir "build:/out=$tmp/out" --stage-dir "cuda:/out=$tmp/out" "$file" >"$tmp/out.txt" 2>&1
    else
        "$check" dockerfile --context "$src" \
            --stage-dir "build:/out=$tmp/out" --stage-dir "cuda:/out=$tmp/out" "$file" >"$tmp/out.txt" 2>&1
    fi
    rc=$?
    if [ "$rc" -ne 1 ]; then
        echo "FAIL $name: exit $rc, want 1"
        cat "$tmp/out.txt"
        fail=$((fail + 1))
    elif ! grep -qF -- "$want" "$tmp/out.txt"; then
        echo "FAIL $name: no '$want' in:"
        cat "$tmp/out.txt"
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
}

# The unedited files pass (with the contexts pointed at the repo).
sed -e "s|context: \.\./\.\.|context: $src|" "$docker/compose.yaml" >"$tmp/compose.yaml"
if "$check" compose --services "$src/deploy/services.txt" \
        --stage-dir "build:/out=$tmp/out" --stage-dir "cuda:/out=$tmp/out" "$tmp/compose.yaml"; then
    pass=$((pass + 1))
else
    echo "FAIL baseline: compose.yaml itself does not pass"
    fail=$((fail + 1))
fi

case_ "typo in a service key" compose \
    '0,/^    restart: unless-stopped$/s//    restart_policy: unless-stopped/' \
    "unknown key 'restart_policy'"
case_ "port on every interface" compose \
    's/"127\.0\.0\.1:\${CORRAL_PORT/"${CORRAL_PORT/' "publish on 127.0.0.1 only"
case_ "port on a LAN address" compose \
    's/127\.0\.0\.1:\${CORRAL_PORT/0.0.0.0:${CORRAL_PORT/' "published on '0.0.0.0'"
case_ "extra flag on a service" compose \
    's/command: \["corral-gateway"\]/command: ["corral-gateway", "--debug"]/' \
    "differs from deploy/services.txt"
case_ "command in shell form" compose \
    's/command: \["corral-registry"\]/command: corral-registry/' "must be a list"
case_ "program not in the image" compose \
    's/command: \["corral-registry"\]/command: ["ollama"]/' "differs from deploy/services.txt"
case_ "no GPU reservation" compose '/driver: nvidia/d' "driver nvidia"
case_ "bad duration" compose '0,/interval: 30s/s//interval: 30 seconds/' \
    "must be a duration"
case_ "undeclared volume" compose '0,/- bus:\/run\/corral/s//- sockets:\/run\/corral/' \
    "'sockets' is not declared"
case_ "runtime dirs differ" compose \
    '0,/CORRAL_RUNTIME_DIR: \/run\/corral\/bus/s//CORRAL_RUNTIME_DIR: \/run\/corral\/other/' \
    "another service has"
case_ "runtime dir on no volume" compose \
    '0,/CORRAL_RUNTIME_DIR: \/run\/corral\/bus/s//CORRAL_RUNTIME_DIR: \/tmp\/bus/' \
    "is on no named volume"
case_ "registry store read-only" compose \
    '0,/- models:\/var\/lib\/corral\/models$/s//- models:\/var\/lib\/corral\/models:ro/' \
    "must mount models read-write"
case_ "no healthcheck" compose '0,/^    healthcheck:$/s//    x-healthcheck:/' \
    "needs a healthcheck"
case_ "healthcheck program missing" compose \
    '0,/\/usr\/local\/lib\/corral\/healthcheck/s//\/usr\/local\/bin\/nothere/' \
    "not an executable file of the image"
case_ "healthcheck in shell form" compose \
    '0,/test: \["CMD", /s//test: ["CMD-SHELL", /' "use [\"CMD\""
case_ "bad restart policy" compose '0,/restart: unless-stopped/s//restart: sometimes/' \
    "must be no, always"
case_ "variable without default" compose '0,/\${CORRAL_TAG:-latest}/s//${CORRAL_TAG}/' \
    "without a default"
case_ "bad interpolation" compose '0,/\${CORRAL_TAG:-latest}/s//${CORRAL TAG}/' \
    "bad \${...} interpolation"
case_ "override tag in the main file" compose '0,/^    init: true$/s//    init: !reset true/' \
    "keep it for override files"
case_ "unknown service" compose 's/^  gateway:$/  gatekeeper:/' "not a corral service"
case_ "depends on a missing service" compose '0,/^      registry:$/s//      registri:/' \
    "is not another service"
case_ "tab indentation" compose '0,/^    init: true$/s//\tinit: true/' \
    "tab in indentation"
case_ "missing Dockerfile" compose \
    's|dockerfile: deploy/docker/Dockerfile.cuda|dockerfile: deploy/docker/Dockerfile.gpu|' \
    "does not exist"
case_ "obsolete version key" compose '1i version: "3.8"' "obsolete"
case_ "bad device count" compose 's/count: all/count: many/' "integer or \"all\""
case_ "ulimit without hard" compose '0,/{soft: 65535, hard: 65535}/s//{soft: 65535}/' \
    "needs soft and hard"
case_ "bad depends condition" compose '0,/condition: service_healthy/s//condition: healthy/' \
    "must be service_started"
case_ "bad port string" compose 's/:11434"$/:114340"/' "is not [[ip:]host:]container"
case_ "anchor" compose '0,/^  registry:$/s//  registry: \&reg/' "anchors"

case_ "COPY source missing" dockerfile \
    's|COPY deploy/docker/healthcheck.sh|COPY deploy/docker/health.sh|' "does not exist"
case_ "COPY from outside the install" dockerfile \
    's|/out/usr/local/bin/ /usr/local/bin/|/out/usr/bin/ /usr/local/bin/|' "does not exist"
case_ "COPY from outside the stage output" dockerfile \
    's|COPY --from=build /out/usr/local/bin/|COPY --from=build /build/bin/|' "outside /out"
case_ "COPY of an ignored path" dockerfile \
    's|^COPY \. /src$|COPY .git /src/.git|' "excluded by"
case_ "COPY leaving the context" dockerfile \
    's|COPY deploy/docker/healthcheck.sh|COPY ../x|' "leaves the build context"
case_ "COPY with a wildcard" dockerfile \
    's|COPY deploy/docker/healthcheck.sh|COPY deploy/docker/*.sh|' "wildcards"
case_ "ADD of a URL" dockerfile \
    's|COPY deploy/docker/healthcheck.sh|ADD https://example.com/x|' "URL"
case_ "CMD in shell form" dockerfile 's|^CMD \["corral", "serve"\]$|CMD corral serve|' \
    "exec form"
case_ "CMD program not in the image" dockerfile \
    's|^CMD \["corral", "serve"\]$|CMD ["ollama", "serve"]|' "not a file this image gets"
case_ "HEALTHCHECK program not in the image" dockerfile \
    's|CMD \["/usr/local/lib/corral/healthcheck"|CMD ["/usr/bin/healthcheck"|' \
    "HEALTHCHECK program"
case_ "runs as root" dockerfile '/^USER corral$/d' "runs as root"
case_ "runs as root, by name" dockerfile 's/^USER corral$/USER root/' "runs as root"
case_ "unknown instruction" dockerfile 's/^EXPOSE /EXPOSES /' "unknown instruction"
case_ "COPY from an image" dockerfile \
    's|COPY --from=build /out/usr/local/bin/|COPY --from=busybox /bin/|' "not an earlier stage"

echo "compose_corpus: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
