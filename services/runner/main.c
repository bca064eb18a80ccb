/* main.c: corral-runner: the runner service, and engine tools over a file.
 *
 *   corral-runner serve --endpoint EP --id ID
 *       (started by the scheduler) serve one model on the bus.
 *   corral-runner tokenize --model FILE [--no-bos] [--special]
 *       UTF-8 text on stdin -> token ids on one line.
 *   corral-runner logits --model FILE --tokens "ID ID ..." --out FILE.f32
 *           [--kv-cache-type f16|q8_0|q4_0]
 *       float32 logits of every position, row after row.
 *   corral-runner image-embed --model TEXT.gguf --mmproj PROJ.gguf
 *           --image FILE --out FILE.f32 [--pixels FILE.f32] [--threads N]
 *           [--prompt "TEXT [img-0] TEXT" --logits FILE.f32]
 *       an image's embeddings as the text model receives them (and the
 *       logits after a prompt holding it).
 *   corral-runner check-template --model FILE
 *       parse the GGUF's Jinja chat template (the registry's create runs
 *       this): "ok", "none", or the error naming the construct.
 *   corral-runner check-template --go-template FILE
 *       parse a Modelfile TEMPLATE as the runner will (create runs this).
 *   corral-runner check-model --model FILE
 *       whether the engine runs the GGUF's architecture (create runs this).
 *   corral-runner quantize --in SRC.gguf --out DST.gguf --type Q4_K_M
 *           [--progress]
 *       requantize an F32/F16/BF16 model (the registry's create --quantize
 *       runs this); --progress prints DONE/TOTAL lines. */
#include "lib/prelude.h"

#include <czmq.h>
#include <signal.h>

#include "lib/log.h"
#include "services/runner/server.h"
#include "services/runner/tools.h"

static const char *flag(int argc, char **argv, const char *name)
{
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return NULL;
}

static bool has(int argc, char **argv, const char *name)
{
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], name))
            return true;
    return false;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: corral-runner serve --endpoint EP --id ID [--direct unix://PATH]\n"
            "       corral-runner tokenize --model FILE [--no-bos] [--special]\n"
            "       corral-runner logits --model FILE --tokens \"ID ...\" "
            "--out FILE.f32 [--kv-cache-type f16|q8_0|q4_0]\n"
            "       corral-runner image-embed --model TEXT.gguf --mmproj PROJ.gguf "
            "--image FILE --out FILE.f32 [--pixels FILE.f32] [--threads N]\n"
            "           [--prompt \"TEXT [img-0] TEXT\" --logits FILE.f32]\n"
            "       corral-runner check-template --model FILE\n"
            "       corral-runner check-template --go-template FILE\n"
            "       corral-runner check-model --model FILE\n"
            "       corral-runner quantize --in SRC.gguf --out DST.gguf "
            "--type Q4_K_M [--progress]\n");
    return 2;
}

static int serve(int argc, char **argv)
{
    const char *ep = flag(argc, argv, "--endpoint");
    const char *id = flag(argc, argv, "--id");
    if (!ep || !id)
        return usage();
    cr_log_init("runner");
    signal(SIGPIPE, SIG_IGN);
    zsys_init();
    zsys_set_logstream(NULL);
    rn_server_t *s = NULL;
    cr_err_t err;
    if (rn_server_new(ep, id, flag(argc, argv, "--direct"), &s, &err)) {
        cr_log_error("%s", err.msg);
        return 1;
    }
    int rc = rn_server_run(s);
    rn_server_destroy(&s);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    const char *cmd = argv[1];
    if (!strcmp(cmd, "serve"))
        return serve(argc, argv);
    if (!strcmp(cmd, "quantize"))
        return rn_tool_quantize(argc, argv);
    const char *go_tmpl = flag(argc, argv, "--go-template");
    if (!strcmp(cmd, "check-template") && go_tmpl)
        return rn_tool_check_go_template(go_tmpl);
    const char *model = flag(argc, argv, "--model");
    if (!model)
        return usage();
    if (!strcmp(cmd, "tokenize"))
        return rn_tool_tokenize(model, !has(argc, argv, "--no-bos"),
                                has(argc, argv, "--special"));
    if (!strcmp(cmd, "check-template"))
        return rn_tool_check_template(model);
    if (!strcmp(cmd, "check-model"))
        return rn_tool_check_model(model);
    if (!strcmp(cmd, "logits")) {
        const char *tokens = flag(argc, argv, "--tokens");
        const char *out = flag(argc, argv, "--out");
        if (!tokens || !out)
            return usage();
        return rn_tool_logits(model, tokens, out, flag(argc, argv, "--kv-cache-type"));
    }
    if (!strcmp(cmd, "image-embed")) {
        const char *mmproj = flag(argc, argv, "--mmproj");
        const char *image = flag(argc, argv, "--image");
        const char *out = flag(argc, argv, "--out");
        const char *threads = flag(argc, argv, "--threads");
        if (!mmproj || !image || !out)
            return usage();
        return rn_tool_image_embed(model, mmproj, image, out, flag(argc, argv, "--pixels"),
                                   threads ? atoi(threads) : 0, flag(argc, argv, "--prompt"),
                                   flag(argc, argv, "--logits"));
    }
    return usage();
}
