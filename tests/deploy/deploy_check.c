/* deploy_check.c: corral-deploy-check, the checks of deploy/ that need no
 * systemd and no Docker engine.
 *
 *   units --services FILE DIR
 *       the .service.in units, corral.target, corral.env and the sysusers
 *       entry in DIR: ExecStart= is services.txt's argv, and every setting
 *       docs/deploy.md promises (notify readiness, runtime and state dirs,
 *       the user, limits, restart, hardening, device rules) is there
 *   compose --services FILE [--stage-dir S:/P=DIR]... [--override] FILE...
 *       compose files: schema, policy, and the Dockerfiles they build
 *   dockerfile --context DIR [--stage-dir S:/P=DIR]... FILE...
 *       Dockerfiles on their own
 *
 * Exit 0 when every check passes, 1 when one fails, 2 on bad usage. */
#include "lib/prelude.h"

#include "tests/deploy/compose.h"
#include "tests/deploy/dockerfile.h"
#include "tests/deploy/report.h"
#include "tests/deploy/unitfile.h"

#define MAX_MAPS 8

static int usage(void)
{
    fprintf(stderr,
            "usage: corral-deploy-check units --services FILE DIR\n"
            "       corral-deploy-check compose --services FILE "
            "[--stage-dir S:/P=DIR]... [--override] FILE...\n"
            "       corral-deploy-check dockerfile --context DIR "
            "[--stage-dir S:/P=DIR]... FILE...\n");
    return 2;
}

/* ---- units ---- */

static bool has_value(const dc_unit_t *u, const char *sec, const char *key,
                      const char *want)
{
    const char *vals[64];
    size_t n = dc_unit_get_all(u, sec, key, vals, 64);
    for (size_t i = 0; i < n; i++) {
        dc_words_t w;
        cr_err_t err;
        if (dc_split_words(vals[i], &w, &err))
            continue;
        bool found = false;
        for (size_t k = 0; k < w.n && !found; k++)
            found = !strcmp(w.w[k], want);
        dc_words_free(&w);
        if (found)
            return true;
    }
    return false;
}

static void expect_eq(dc_report_t *r, const char *file, const dc_unit_t *u,
                      const char *sec, const char *key, const char *want)
{
    const char *v = dc_unit_get(u, sec, key);
    DC_EXPECT(r, v && !strcmp(v, want), file, 0, "[%s] %s=%s expected, "
              "found %s", sec, key, want, v ? v : "nothing");
}

static void check_service_unit(dc_report_t *r, const char *dir,
                               const dc_service_t *svc)
{
    char file[2048];
    snprintf(file, sizeof file, "%s/corral-%s.service.in", dir, svc->name);
    dc_unit_t *u;
    cr_err_t err;
    if (dc_unit_load(file, &u, &err)) {
        dc_problem(r, file, 0, "%s", err.msg);
        return;
    }
    const char *S = "Service";
    DC_EXPECT(r, dc_unit_get(u, "Unit", "Description"), file, 0,
              "[Unit] needs a Description=");
    expect_eq(r, file, u, "Unit", "PartOf", "corral.target");
    expect_eq(r, file, u, "Install", "WantedBy", "corral.target");

    /* ExecStart: exactly services.txt's argv, from the install's bin dir,
     * with no prefix (a '+' would run it outside the sandbox). */
    const char *exec[4];
    size_t n_exec = dc_unit_get_all(u, S, "ExecStart", exec, 4);
    DC_EXPECT(r, n_exec == 1, file, 0, "one ExecStart= expected, found %zu",
              n_exec);
    if (n_exec == 1) {
        /* The template's @CORRAL_BINDIR@ would read as systemd's '@'
         * prefix: stand a plain directory in for it. */
        char line[1024];
        const char *tok = "@CORRAL_BINDIR@";
        const char *at = strstr(exec[0], tok);
        snprintf(line, sizeof line, "%.*s/corral-bindir%s",
                 at ? (int)(at - exec[0]) : 0, exec[0],
                 at ? at + strlen(tok) : exec[0]);
        dc_words_t argv;
        char prefix[8];
        if (dc_split_exec(line, &argv, prefix, &err)) {
            dc_problem(r, file, 0, "ExecStart: %s", err.msg);
        } else {
            char want0[256];
            snprintf(want0, sizeof want0, "/corral-bindir/%s",
                     svc->argv.w[0]);
            DC_EXPECT(r, !prefix[0], file, 0, "ExecStart has prefix '%s'",
                      prefix);
            bool same = argv.n == svc->argv.n && !strcmp(argv.w[0], want0);
            for (size_t i = 1; same && i < argv.n; i++)
                same = !strcmp(argv.w[i], svc->argv.w[i]);
            DC_EXPECT(r, same, file, 0, "ExecStart=%s differs from "
                      "deploy/services.txt (%s ...)", exec[0],
                      svc->argv.w[0]);
            dc_words_free(&argv);
        }
    }

    expect_eq(r, file, u, S, "Type", "notify");
    expect_eq(r, file, u, S, "User", "corral");
    expect_eq(r, file, u, S, "Group", "corral");
    DC_EXPECT(r, has_value(u, S, "EnvironmentFile", "-/etc/corral/corral.env"),
              file, 0, "EnvironmentFile=-/etc/corral/corral.env missing");
    DC_EXPECT(r, has_value(u, S, "Environment",
                           "CORRAL_RUNTIME_DIR=%t/corral"),
              file, 0, "Environment=CORRAL_RUNTIME_DIR=%%t/corral missing");
    expect_eq(r, file, u, S, "RuntimeDirectory", "corral");
    expect_eq(r, file, u, S, "RuntimeDirectoryMode", "0700");
    /* Shared by the three units: one stopping must not remove it. */
    expect_eq(r, file, u, S, "RuntimeDirectoryPreserve", "yes");
    bool store = has_value(u, S, "Environment", "CORRAL_MODELS=%S/corral/models");
    bool wants_store = !strcmp(svc->name, "registry") ||
                       !strcmp(svc->name, "scheduler");
    DC_EXPECT(r, store == wants_store, file, 0,
              "Environment=CORRAL_MODELS=%%S/corral/models %s",
              wants_store ? "missing" : "where the store is not used");
    if (wants_store)
        DC_EXPECT(r, has_value(u, S, "StateDirectory", "corral/models"),
                  file, 0, "StateDirectory= must make corral/models");
    expect_eq(r, file, u, S, "LimitNOFILE", "65535");
    expect_eq(r, file, u, S, "Restart", "on-failure");
    DC_EXPECT(r, dc_unit_get(u, S, "TimeoutStopSec"), file, 0,
              "TimeoutStopSec= must bound the drain on SIGTERM");
    expect_eq(r, file, u, S, "NoNewPrivileges", "yes");
    expect_eq(r, file, u, S, "ProtectSystem", "strict");
    expect_eq(r, file, u, S, "ProtectHome", "yes");
    expect_eq(r, file, u, S, "PrivateTmp", "yes");
    const char *caps = dc_unit_get(u, S, "CapabilityBoundingSet");
    DC_EXPECT(r, caps && !caps[0], file, 0,
              "CapabilityBoundingSet= (empty) expected");

    const char *dev[16];
    size_t n_dev = dc_unit_get_all(u, S, "DeviceAllow", dev, 16);
    if (!strcmp(svc->name, "scheduler")) {
        /* The scheduler's runners reach the NVIDIA devices, nothing else. */
        expect_eq(r, file, u, S, "DevicePolicy", "closed");
        const char *pd = dc_unit_get(u, S, "PrivateDevices");
        DC_EXPECT(r, !pd || !strcmp(pd, "no"), file, 0,
                  "PrivateDevices= would hide /dev/nvidia*");
        DC_EXPECT(r, n_dev > 0, file, 0, "DeviceAllow= for the GPUs missing");
        for (size_t i = 0; i < n_dev; i++)
            DC_EXPECT(r, !strncmp(dev[i], "char-nvidia", 11) ||
                          !strncmp(dev[i], "/dev/nvidia", 11),
                      file, 0, "DeviceAllow=%s is not an NVIDIA device",
                      dev[i]);
    } else {
        expect_eq(r, file, u, S, "PrivateDevices", "yes");
        DC_EXPECT(r, n_dev == 0, file, 0, "DeviceAllow= on a service that "
                  "needs no device");
    }
    dc_unit_free(&u);
}

static int cmd_units(int argc, char **argv)
{
    const char *services = NULL, *dir = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--services") && i + 1 < argc)
            services = argv[++i];
        else if (!dir)
            dir = argv[i];
        else
            return usage();
    }
    if (!services || !dir)
        return usage();
    dc_services_t svcs;
    cr_err_t err;
    if (dc_services_load(services, &svcs, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    dc_report_t r = {0};
    for (size_t i = 0; i < svcs.n; i++)
        check_service_unit(&r, dir, &svcs.s[i]);

    char file[2048];
    snprintf(file, sizeof file, "%s/corral.target", dir);
    dc_unit_t *t;
    if (dc_unit_load(file, &t, &err)) {
        dc_problem(&r, file, 0, "%s", err.msg);
    } else {
        expect_eq(&r, file, t, "Install", "WantedBy", "multi-user.target");
        for (size_t i = 0; i < svcs.n; i++) {
            char unit[64];
            snprintf(unit, sizeof unit, "corral-%s.service", svcs.s[i].name);
            DC_EXPECT(&r, has_value(t, "Install", "Also", unit), file, 0,
                      "[Install] Also= should list %s", unit);
            DC_EXPECT(&r, has_value(t, "Unit", "After", unit), file, 0,
                      "[Unit] After= should list %s", unit);
        }
        dc_unit_free(&t);
    }

    /* The example environment file parses as systemd reads it, and leaves
     * the units' runtime dir alone. */
    snprintf(file, sizeof file, "%s/corral.env", dir);
    dc_env_t env = {0};
    if (dc_env_file_load(file, &env, &err))
        dc_problem(&r, file, 0, "%s", err.msg);
    else
        DC_EXPECT(&r, !dc_env_value(&env, "CORRAL_RUNTIME_DIR"), file, 0,
                  "must not set CORRAL_RUNTIME_DIR (the units own it)");
    dc_env_free(&env);

    snprintf(file, sizeof file, "%s/corral.sysusers", dir);
    char *text = NULL;
    if (dc_read_file(file, 4096, &text, NULL, &err))
        dc_problem(&r, file, 0, "%s", err.msg);
    else
        DC_EXPECT(&r, strstr(text, "\nu corral ") || !strncmp(text, "u corral ", 9),
                  file, 0, "no 'u corral' line");
    free(text);
    dc_services_free(&svcs);
    printf("corral-deploy-check units: %d checks, %d problems\n", r.checks,
           r.problems);
    return r.problems ? 1 : 0;
}

/* ---- compose / dockerfile ---- */

static int cmd_compose(int argc, char **argv, bool dockerfile_mode)
{
    const char *services = NULL, *context = NULL;
    dc_stage_map_t maps[MAX_MAPS];
    size_t n_maps = 0;
    bool override = false;
    const char *files[16];
    size_t n_files = 0;
    cr_err_t err;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--services") && i + 1 < argc) {
            services = argv[++i];
        } else if (!strcmp(argv[i], "--context") && i + 1 < argc) {
            context = argv[++i];
        } else if (!strcmp(argv[i], "--stage-dir") && i + 1 < argc) {
            if (n_maps >= MAX_MAPS ||
                dc_stage_map_parse(argv[++i], &maps[n_maps++], &err)) {
                fprintf(stderr, "%s\n", n_maps >= MAX_MAPS ? "too many maps"
                                                           : err.msg);
                return 2;
            }
        } else if (!strcmp(argv[i], "--override")) {
            override = true;
        } else if (argv[i][0] == '-' || n_files >= CR_ARRAY_LEN(files)) {
            return usage();
        } else {
            files[n_files++] = argv[i];
        }
    }
    if (!n_files || (dockerfile_mode ? !context : !services))
        return usage();
    dc_report_t r = {0};
    if (dockerfile_mode) {
        for (size_t i = 0; i < n_files; i++) {
            dc_image_t img;
            if (dc_dockerfile_check(files[i], context, maps, n_maps, &img, &r,
                                    &err))
                dc_problem(&r, files[i], 0, "%s", err.msg);
            dc_image_free(&img);
        }
        printf("corral-deploy-check dockerfile: %d checks, %d problems\n",
               r.checks, r.problems);
        return r.problems ? 1 : 0;
    }
    dc_services_t svcs;
    if (dc_services_load(services, &svcs, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    dc_compose_opts_t o = {&svcs, maps, n_maps, override};
    for (size_t i = 0; i < n_files; i++)
        if (dc_compose_check(files[i], &o, &r, &err))
            dc_problem(&r, files[i], 0, "%s", err.msg);
    dc_services_free(&svcs);
    printf("corral-deploy-check compose: %d checks, %d problems\n", r.checks,
           r.problems);
    return r.problems ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (!strcmp(argv[1], "units"))
        return cmd_units(argc - 2, argv + 2);
    if (!strcmp(argv[1], "compose"))
        return cmd_compose(argc - 2, argv + 2, false);
    if (!strcmp(argv[1], "dockerfile"))
        return cmd_compose(argc - 2, argv + 2, true);
    return usage();
}
