#!/bin/sh
# doctor.sh: `corral doctor` on a store built by hand with one of each
# fault (a corrupt blob, a removed blob, a partial download, a temp file of
# an unfinished manifest write, a manifest that does not parse, a blob no
# manifest names) and one sound model: the report names each fault,
# --fix removes exactly the broken entries, and a second check is clean.
set -u
bin="$CORRAL_BUILD_DIR/bin"
fail() { echo "doctor: FAIL: $*"; [ -f "$t/out" ] && cat "$t/out"; exit 1; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
store="$t/models"
mkdir -p "$store/blobs" "$store/manifests/registry.ollama.ai/library"

# blob TEXT: stores TEXT as a blob; prints its hex digest.
blob() {
    printf '%s' "$1" >"$t/b"
    h=$(sha256sum "$t/b" | cut -c1-64)
    mv "$t/b" "$store/blobs/sha256-$h"
    echo "$h"
}
# manifest MODEL CONFIG_HEX LAYER_HEX LAYER_SIZE: a manifest for MODEL:latest.
manifest() {
    d="$store/manifests/registry.ollama.ai/library/$1"
    mkdir -p "$d"
    printf '{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:%s","size":2},"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:%s","size":%s}]}' \
        "$2" "$3" "$4" >"$d/latest"
}

cfg=$(blob '{}')
good=$(blob 'good weights')
manifest good "$cfg" "$good" 12
bad=$(blob 'weights that rot')
manifest rotten "$cfg" "$bad" 16
printf 'weights that ROT' >"$store/blobs/sha256-$bad"        # corrupt
gone=$(blob 'weights removed')
manifest gone "$cfg" "$gone" 15
rm "$store/blobs/sha256-$gone"                                 # missing
only_gone=$(blob 'template of the gone model')                 # named only by a dangling one
d="$store/manifests/registry.ollama.ai/library/gone"
sed "s/\]}\$/,{\"mediaType\":\"application\/vnd.ollama.image.template\",\"digest\":\"sha256:$only_gone\",\"size\":26}]}/" \
    "$d/latest" >"$d/x" && mv "$d/x" "$d/latest"
unused=$(blob 'nobody uses me')                                # unused
mkdir -p "$store/manifests/registry.ollama.ai/library/broken"
echo '{"schemaVersion":2,"layers":[' >"$store/manifests/registry.ollama.ai/library/broken/latest"
printf 'half a pull' >"$store/blobs/sha256-$(printf x | sha256sum | cut -c1-64)-partial"
printf 'half a manifest' >"$store/manifests/registry.ollama.ai/library/good/.latest.tmp-123"

# The check: every fault named, nothing removed, exit 1.
"$bin/corral" doctor --models "$store" >"$t/out" 2>&1
rc=$?
[ $rc = 1 ] || fail "doctor exited $rc on a broken store"
for want in "corrupt blob sha256-$bad" \
            "dangling manifest registry.ollama.ai/library/rotten:latest: blob sha256-$bad is corrupt" \
            "dangling manifest registry.ollama.ai/library/gone:latest: blob sha256-$gone" \
            "corrupt manifest registry.ollama.ai/library/broken:latest" \
            "unused blob sha256-$unused" \
            "partial file blobs/sha256-" \
            "partial file manifests/registry.ollama.ai/library/good/.latest.tmp-123" \
            "4 manifests, "; do
    grep -qF "$want" "$t/out" || fail "the report lacks: $want"
done
grep -q "good:latest" "$t/out" && fail "the sound model was reported"
grep -q "removed" "$t/out" && fail "removed something without --fix"
[ -f "$store/blobs/sha256-$bad" ] || fail "the corrupt blob went without --fix"

# The fix: the broken entries go, the sound model stays whole.
"$bin/corral" doctor --fix --models "$store" >"$t/out" 2>&1 || fail "doctor --fix exited $?"
for gone_path in "blobs/sha256-$bad" "blobs/sha256-$unused" "blobs/sha256-$only_gone" \
                 "manifests/registry.ollama.ai/library/rotten/latest" \
                 "manifests/registry.ollama.ai/library/gone/latest" \
                 "manifests/registry.ollama.ai/library/broken/latest" \
                 "manifests/registry.ollama.ai/library/good/.latest.tmp-123"; do
    [ -e "$store/$gone_path" ] && fail "--fix left $gone_path"
done
ls "$store/blobs" | grep -q partial && fail "--fix left the partial download"
for keep in "blobs/sha256-$good" "blobs/sha256-$cfg" \
            "manifests/registry.ollama.ai/library/good/latest"; do
    [ -f "$store/$keep" ] || fail "--fix removed $keep of the sound model"
done

# A blob only a dangling manifest named counts as unused: it went too.
grep -qF "unused blob sha256-$only_gone" "$t/out" || fail "the dangling model's blob not named"
"$bin/corral" doctor --models "$store" >"$t/out" 2>&1 || fail "the fixed store still has problems"
grep -qF "1 manifests, 2 blobs checked: 0 problems" "$t/out" || fail "unexpected summary"

# Unused blobs alone (a create's converted uploads) are no problem: exit 0,
# named, and the summary says --fix or the registry's next start removes them.
stray=$(blob 'an upload a create converted')
env -u OLLAMA_NOPRUNE -u CORRAL_NOPRUNE "$bin/corral" doctor --models "$store" >"$t/out" 2>&1 ||
    fail "doctor exited $? on a store with only an unused blob"
grep -qF "unused blob sha256-$stray" "$t/out" || fail "the unused blob was not named"
grep -qF "1 manifests, 3 blobs checked: 0 problems, 1 unused blobs (corral doctor --fix removes them; unused blobs also go when the registry next starts)" "$t/out" ||
    fail "unexpected summary with an unused blob"
[ -f "$store/blobs/sha256-$stray" ] || fail "the unused blob went without --fix"

# No store: a clear error.
"$bin/corral" doctor --models "$t/none" >"$t/out" 2>&1 && fail "doctor on a missing store succeeded"
grep -q "no model store" "$t/out" || fail "a missing store was not named"
echo "doctor: 1 passed, 0 failed"
