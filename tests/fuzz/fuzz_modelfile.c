/* fuzz_modelfile: Modelfile text (cli/modelfile.c), and what `corral
 * create` derives from a parsed one: the parameters object and the text
 * written back, which must parse again. */
#include "tests/fuzz/fuzz.h"

#include <jansson.h>
#include <string.h>

#include "cli/modelfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cli_modelfile_t *mf = NULL;
    cr_err_t err = {0};
    if (cli_modelfile_parse((const char *)data, size, &mf, &err) != CR_OK)
        return 0;
    json_t *params = NULL;
    if (cli_modelfile_params_json(mf, &params, &err) == CR_OK)
        json_decref(params);
    char *text = cli_modelfile_serialize(mf);
    if (text) {
        cli_modelfile_t *again = NULL;
        if (cli_modelfile_parse(text, strlen(text), &again, &err) != CR_OK) {
            fprintf(stderr, "fuzz_modelfile: written back, it does not parse: %s\n%s\n",
                    err.msg, text);
            abort();
        }
        cli_modelfile_destroy(&again);
        free(text);
    }
    cli_modelfile_destroy(&mf);
    return 0;
}
