/* fuzz_request: the gateway's request bodies, through every converter of
 * client JSON (services/gateway): the native parser of each /api route,
 * and the OpenAI, Anthropic and Responses translators, whose native output
 * is parsed again as the gateway does. One input goes through all of them,
 * so a seed of any surface feeds every converter. */
#include "tests/fuzz/fuzz.h"

#include "lib/buf.h"
#include "lib/log.h"
#include "services/gateway/anthropic.h"
#include "services/gateway/convert.h"
#include "services/gateway/openai.h"
#include "services/gateway/responses.h"

static void native(gw_api_t api, const char *body, size_t len)
{
    gw_request_t r;
    cr_err_t err = {0};
    if (gw_request_parse(api, body, len, &r, &err) == CR_OK)
        gw_request_clear(&r);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* The converters warn about odd options; a line per input would make
     * the run mostly terminal output. Errors still print. */
    cr_log_level_g = CR_LOG_ERROR;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    for (int api = GW_API_GENERATE; api <= GW_API_RERANK; api++)
        native((gw_api_t)api, body, size);

    cr_buf_t out;
    cr_buf_init(&out, 8u << 20);
    cr_err_t err = {0};
    static const struct {
        gw_oai_api_t oai;
        gw_api_t native;
    } oai[] = {{GW_OAI_CHAT, GW_API_CHAT},
               {GW_OAI_COMPLETIONS, GW_API_GENERATE},
               {GW_OAI_EMBEDDINGS, GW_API_EMBED}};
    for (size_t i = 0; i < sizeof oai / sizeof oai[0]; i++) {
        gw_oai_info_t info = {0};
        cr_buf_reset(&out);
        if (gw_oai_translate(oai[i].oai, body, size, &out, &info, &err) == CR_OK)
            native(oai[i].native, out.data, out.len);
    }
    for (int count = 0; count < 2; count++) {
        gw_anth_info_t info = {0};
        cr_buf_reset(&out);
        if (gw_anth_translate(body, size, count, &out, &info, &err) == CR_OK)
            native(GW_API_CHAT, out.data, out.len);
    }
    gw_resp_info_t rinfo = {0};
    cr_buf_reset(&out);
    if (gw_resp_translate(body, size, &out, &rinfo, &err) == CR_OK)
        native(GW_API_CHAT, out.data, out.len);
    cr_buf_free(&out);
    return 0;
}
