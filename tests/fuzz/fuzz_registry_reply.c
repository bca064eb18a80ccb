/* fuzz_registry_reply: what a remote registry sends back during a pull or
 * push besides manifests (services/registry/oci_client.c): the
 * WWW-Authenticate bearer challenge, Location headers resolved against
 * the request URL, and an error reply's status and body. The input is
 * split at its first NUL: header text, then body. */
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "services/registry/oci_client.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t hlen = nul ? (size_t)(nul - data) : size;
    size_t body_len = nul ? size - hlen - 1 : 0;
    char hdr[2048];
    if (hlen >= sizeof hdr)
        hlen = sizeof hdr - 1;
    memcpy(hdr, data, hlen);
    hdr[hlen] = '\0';

    char realm[1024], service[512], scope[1024];
    (void)reg_parse_bearer(hdr, realm, sizeof realm, service, sizeof service, scope,
                           sizeof scope);
    char url[REG_URL_MAX];
    (void)reg_url_resolve("https://registry.example:5000/v2/library/m/blobs/uploads/?x=1",
                          hdr, url, sizeof url);
    (void)reg_url_resolve(hdr, "/v2/token?scope=a", url, sizeof url);

    reg_http_resp_t resp;
    memset(&resp, 0, sizeof resp);
    cr_buf_init(&resp.body, REG_HTTP_BODY_MAX);
    resp.status = hlen ? 400 + (long)(data[0] % 200) : 404;
    resp.content_length = -1;
    if (nul && cr_buf_append(&resp.body, nul + 1, body_len) != CR_OK)
        abort();
    cr_err_t err = {0};
    (void)reg_oci_status_err(&resp, &err);
    reg_http_resp_free(&resp);
    return 0;
}
