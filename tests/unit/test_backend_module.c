/* test_backend_module.c: the runner's backend modules (backend_module.h,
 * backends.h) on a host without a usable GPU.
 *
 *   - the path: $CORRAL_BACKEND_DIR/backend-cuda.so, else
 *     <exe dir>/../lib/corral/backend-cuda.so;
 *   - each refusal is a status with a message naming the cause: no file,
 *     not a shared object, no entry symbol, another ABI, another corral
 *     version (fake modules built by tests/unit/CMakeLists.txt), and
 *     rn_backend_module_check's size and name checks on tables;
 *   - rn_backend_accel says why no accelerator: the CUDA kind off without
 *     CORRAL_EXPERIMENTAL_CUDA, no driver library (then the module is not
 *     loaded), the module's probe finding no device;
 *   - the engine, given a plan with every layer on CUDA device 0, loads on
 *     the CPU and keeps the reason (rn_engine_offload_error), both when the
 *     probe fails and when the device's create fails, and still answers;
 *   - a CPU plan never maps a backend module nor a CUDA library (read from
 *     /proc/self/maps);
 *   - the real lib/corral/backend-cuda.so, when the build has one, loads
 *     and its probe reports no device cleanly (CUDA_VISIBLE_DEVICES="").
 */
#include "lib/prelude.h"

#include <sys/stat.h>
#include <unistd.h>

#include "services/runner/backend_module.h"
#include "services/runner/backends.h"
#include "services/runner/engine.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_load.h"

static char fakes_g[512];

/* CORRAL_BACKEND_DIR = the fake module folder of `c` ("" = unset). */
static void use_case(const char *c)
{
    char dir[700];
    snprintf(dir, sizeof dir, "%s/%s", fakes_g, c);
    if (*c)
        setenv("CORRAL_BACKEND_DIR", dir, 1);
    else
        unsetenv("CORRAL_BACKEND_DIR");
}

/* Opens the cuda module of case c; the status, with err's message
 * required to contain `has`. */
static cr_status_t open_case(const char *c, const char *has)
{
    use_case(c);
    const be_module_t *m = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = rn_backend_module_open("cuda", &m, &err);
    if (has)
        CHECK_MSG(strstr(err.msg, has), "case %s: '%s' lacks '%s'", c, err.msg, has);
    CHECK(st ? m == NULL : m != NULL);
    return st;
}

/* Whether /proc/self/maps names a file containing `what`. */
static bool mapped(const char *what)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

/* Loads model with a plan of every layer on CUDA device 0; checks the
 * engine fell back with a reason containing `has`, and answers. */
static void load_planned(const char *model, const char *has)
{
    msg_options_t o;
    msg_load_body_t ld;
    test_load_body(&ld, &o, model, NULL, 64, 1);
    msg_device_split_t dev = {.index = 0, .has_index = true, .first_layer = 0,
                              .has_first_layer = true, .layers = 99, .has_layers = true};
    ld.gpu_layers = 99;
    ld.has_gpu_layers = true;
    ld.devices.v = &dev;
    ld.devices.n = 1;
    ld.has_devices = true;
    rn_engine_t *e = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_MSG(rn_engine_load(&ld, &e, &err) == CR_OK, "load: %s", err.msg);
    if (!e)
        return;
    CHECK_EQ_INT(rn_engine_gpu_layers(e), 0);
    CHECK_EQ_INT(rn_engine_vram_bytes(e), 0);
    CHECK_MSG(strstr(rn_engine_offload_error(e), has), "offload_error '%s' lacks '%s'",
              rn_engine_offload_error(e), has);
    CHECK(rn_engine_size_bytes(e) > 0);
    rn_engine_destroy(&e);
}

static cr_status_t no_probe(int *n, cr_err_t *err)
{
    CR_UNUSED(err);
    *n = 0;
    return CR_OK;
}

static cr_status_t no_create(int device, be_backend_t **out, cr_err_t *err)
{
    CR_UNUSED(device);
    CR_UNUSED(err);
    *out = NULL;
    return CR_E_UNAVAILABLE;
}

static void check_tables(void)
{
    static const be_module_t good = {.abi = BE_MODULE_ABI, .version = CORRAL_VERSION,
                                     .module_size = sizeof(be_module_t),
                                     .ops_size = sizeof(be_ops_t),
                                     .err_size = sizeof(cr_err_t), .name = "cuda",
                                     .probe = no_probe, .create = no_create};
    cr_err_t err;
    CHECK_EQ_INT(rn_backend_module_check(&good, "cuda", "m.so", &err), CR_OK);
    be_module_t m = good;
    m.ops_size--;
    CHECK_EQ_INT(rn_backend_module_check(&m, "cuda", "m.so", &err), CR_E_UNSUPPORTED);
    CHECK(strstr(err.msg, "struct sizes differ"));
    m = good;
    m.name = "rocm";
    CHECK_EQ_INT(rn_backend_module_check(&m, "cuda", "m.so", &err), CR_E_UNSUPPORTED);
    CHECK(strstr(err.msg, "holds backend 'rocm', not 'cuda'"));
    m = good;
    m.create = NULL;
    CHECK_EQ_INT(rn_backend_module_check(&m, "cuda", "m.so", &err), CR_E_UNSUPPORTED);
    m = good;
    m.version = NULL;
    CHECK_EQ_INT(rn_backend_module_check(&m, "cuda", "m.so", &err), CR_E_UNSUPPORTED);
    CHECK_EQ_INT(rn_backend_module_check(NULL, "cuda", "m.so", &err), CR_E_UNSUPPORTED);
}

int main(void)
{
    const char *build = getenv("CORRAL_BUILD_DIR");
    if (!build)
        return check_skip("backend_module", "CORRAL_BUILD_DIR unset (run through ctest)");
    snprintf(fakes_g, sizeof fakes_g, "%s/tests/fake_modules", build);
    setenv("CUDA_VISIBLE_DEVICES", "", 1); /* a GPU host tests the same paths */

    /* the path */
    char path[800], dir[700];
    cr_err_t err;
    unsetenv("CORRAL_BACKEND_DIR");
    CHECK_EQ_INT(rn_backend_module_path("cuda", path, sizeof path, &err), CR_OK);
    CHECK_MSG(strstr(path, "/../lib/corral/backend-cuda.so"), "default path %s", path);
    setenv("CORRAL_BACKEND_DIR", "/opt/x", 1);
    CHECK_EQ_INT(rn_backend_module_path("cuda", path, sizeof path, &err), CR_OK);
    CHECK_EQ_STR(path, "/opt/x/backend-cuda.so");

    /* a CPU plan maps no module: checked before anything loads one */
    char model[300], tmp[200];
    snprintf(tmp, sizeof tmp, "/tmp/corral-bemod-%d", (int)getpid());
    mkdir(tmp, 0700);
    snprintf(model, sizeof model, "%s/m.gguf", tmp);
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.type = CR_TYPE_Q8_0;
    CHECK_EQ_INT(rn_synth_write(&so, model, &err), CR_OK);
    setenv("CORRAL_EXPERIMENTAL_CUDA", "1", 1);
    unsetenv("CORRAL_BACKEND_DIR");
    rn_engine_t *e = test_engine_load(model, NULL, 64, 1);
    CHECK(!mapped("backend-cuda.so"));
    CHECK(!mapped("libcudart") && !mapped("libcublas"));
    if (e)
        CHECK_EQ_STR(rn_engine_offload_error(e), "");
    rn_engine_destroy(&e);

    /* refusals, each naming its cause */
    CHECK_EQ_INT(open_case("missing", "no cuda backend module at"), CR_E_NOT_FOUND);
    snprintf(dir, sizeof dir, "%s/garbage", tmp);
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/backend-cuda.so", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("not an ELF file\n", f);
        fclose(f);
    }
    setenv("CORRAL_BACKEND_DIR", dir, 1);
    const be_module_t *mod = NULL;
    CHECK_EQ_INT(rn_backend_module_open("cuda", &mod, &err), CR_E_UNAVAILABLE);
    CHECK_MSG(strstr(err.msg, "cannot load") && strstr(err.msg, path), "%s", err.msg);
    unlink(path);
    rmdir(dir);
    CHECK_EQ_INT(open_case("noentry", "has no be_module_entry"), CR_E_UNAVAILABLE);
    CHECK_EQ_INT(open_case("abi", "module ABI 2, this runner needs 1"), CR_E_UNSUPPORTED);
    CHECK_EQ_INT(open_case("version", "is from corral 0.0.0-other, this runner is"),
                 CR_E_UNSUPPORTED);
    CHECK_EQ_INT(open_case("nodev", NULL), CR_OK);
    check_tables();

    /* why no accelerator (a library every host has plays the driver) */
    setenv("CORRAL_CUDA_DRIVER_LIB", "libc.so.6", 1);
    cr_err_t why;
    unsetenv("CORRAL_EXPERIMENTAL_CUDA");
    use_case("nodev");
    CHECK(rn_backend_accel(&why) == NULL);
    CHECK_MSG(strstr(why.msg, "CORRAL_EXPERIMENTAL_CUDA=1"), "%s", why.msg);
    setenv("CORRAL_EXPERIMENTAL_CUDA", "1", 1);
    CHECK(rn_backend_accel(&why) == NULL);
    CHECK_EQ_STR(why.msg, "cuda: fake module: no device");
    CHECK(rn_backend_accel(NULL) == NULL);
    use_case("dev");
    CHECK(rn_backend_accel(&why) != NULL);

    /* no driver: the module is not even loaded */
    use_case("nodev");
    setenv("CORRAL_CUDA_DRIVER_LIB", "libno-such-driver.so.1", 1);
    CHECK(rn_backend_accel(&why) == NULL);
    CHECK_MSG(strstr(why.msg, "cuda: no NVIDIA driver (libno-such-driver.so.1"), "%s",
              why.msg);
    load_planned(model, "no NVIDIA driver");
    /* the fakes past the driver check: a library every host has plays it */
    setenv("CORRAL_CUDA_DRIVER_LIB", "libc.so.6", 1);

    /* the engine falls back with the reason, and serves */
    use_case("nodev");
    load_planned(model, "cuda: fake module: no device");
    use_case("dev");
    load_planned(model, "cuda device 0: fake module: cannot open the device");
    use_case("version");
    load_planned(model, "is from corral 0.0.0-other");
    use_case("missing");
    load_planned(model, "no cuda backend module at");

    /* the real module, when built: loads, and says there is no device */
    unsetenv("CORRAL_BACKEND_DIR");
    unsetenv("CORRAL_CUDA_DRIVER_LIB");
    char real[600];
    snprintf(real, sizeof real, "%s/lib/corral/backend-cuda.so", build);
    if (access(real, R_OK) == 0) {
        snprintf(dir, sizeof dir, "%s/lib/corral", build);
        setenv("CORRAL_BACKEND_DIR", dir, 1);
        CHECK_EQ_INT(rn_backend_module_open("cuda", &mod, &err), CR_OK);
        if (mod) {
            int n = -1;
            cr_err_clear(&err);
            CHECK_EQ_INT(mod->probe(&n, &err), CR_E_UNAVAILABLE);
            CHECK_EQ_INT(n, 0);
            CHECK_MSG(strstr(err.msg, "module built for"), "%s", err.msg);
            printf("backend_module: the real module says: %s\n", err.msg);
        }
        load_planned(model, "cuda: ");
    } else {
        printf("backend_module: no real CUDA module in this build (%s)\n", real);
    }

    unlink(model);
    rmdir(tmp);
    return check_finish("backend_module");
}
