/* fuzz_model_name: model names as clients and Modelfiles spell them
 * (lib/model_name.c): parse, explain, and print back what parsed. */
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "lib/model_name.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    cr_model_name_t n;
    cr_err_t err = {0};
    char why[256];
    cr_model_name_why(text, size, why, sizeof why);
    if (cr_model_name_parse_n(text, size, &n, &err) != CR_OK)
        return 0;
    char shown[CR_NAME_BUF], full[CR_NAME_BUF], rel[2 * CR_NAME_BUF];
    cr_model_name_display(&n, shown, sizeof shown);
    cr_model_name_full(&n, full, sizeof full);
    cr_model_name_manifest_relpath(&n, rel, sizeof rel);
    /* What parsed prints back to a name that parses to the same thing. */
    cr_model_name_t again;
    if (cr_model_name_parse(full, &again, &err) != CR_OK || !cr_model_name_equal(&n, &again))
        abort();
    return 0;
}
