/* fuzz_manifest: OCI image manifests (services/registry/manifest.c), as a
 * registry answers a pull and as the store holds them. A manifest that
 * parses is encoded and must parse again. */
#include "tests/fuzz/fuzz.h"

#include "lib/buf.h"
#include "services/registry/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reg_manifest_t m;
    cr_err_t err = {0};
    if (reg_manifest_parse((const char *)data, size, &m, &err) != CR_OK)
        return 0;
    (void)reg_manifest_total_size(&m);
    cr_buf_t out;
    cr_buf_init(&out, 64u << 20);
    if (reg_manifest_encode(&m, &out) == CR_OK) {
        reg_manifest_t again;
        if (reg_manifest_parse(out.data, out.len, &again, &err) != CR_OK) {
            fprintf(stderr, "fuzz_manifest: encoded, it does not parse: %s\n", err.msg);
            abort();
        }
        reg_manifest_free(&again);
    }
    cr_buf_free(&out);
    reg_manifest_free(&m);
    return 0;
}
