/* e2e.h: helpers for end-to-end tests that run the real binaries.
 *
 * An e2e test starts `corral serve` with a private runtime dir, store and
 * loopback port, talks HTTP to it with libcurl, runs the CLI as a child
 * process, and stops everything it started, by PID, at the end. */
#ifndef CR_E2E_H
#define CR_E2E_H

#include "lib/prelude.h"

#include <jansson.h>
#include <pthread.h>
#include <sys/types.h>

typedef struct e2e {
    char bin_dir[1024];     /* build/bin */
    char tmp[1024];         /* private temp dir (removed at the end) */
    char host[64];          /* 127.0.0.1:PORT */
    pid_t serve_pid;
} e2e_t;

typedef struct e2e_resp {
    long status;
    char *body;     /* NUL-terminated; owned */
    size_t len;
} e2e_resp_t;

/* A loopback TCP port free at the time of the call (the kernel's pick);
 * -1 when none could be had. */
int e2e_free_port(void);

/* A TCP connection to 127.0.0.1:port; the socket, or -1. */
int e2e_connect_port(int port);

/* Connects to t's gateway and sends a POST of body (JSON) to path the raw
 * way, a client the test drops at will by closing the socket. The socket,
 * or -1. */
int e2e_post_raw(e2e_t *t, const char *path, const char *body);

/* Reads fd into buf (cap bytes, kept NUL-terminated; only the tail kept
 * when long) until needle shows, the peer closes or wait_ms pass; true if
 * it showed. */
bool e2e_read_until(int fd, char *buf, size_t cap, size_t *len, const char *needle,
                    int wait_ms);

/* Makes the temp dir, picks a free port, sets CORRAL_RUNTIME_DIR,
 * CORRAL_MODELS and CORRAL_HOST, starts `corral serve` and waits for HEAD /
 * to answer. False (with a message on stderr) on failure. */
bool e2e_start(e2e_t *t);

/* SIGTERM to serve, wait (then SIGKILL), remove the temp dir. */
void e2e_stop(e2e_t *t);

/* Stops serve as e2e_stop does but keeps the temp dir; e2e_serve_start
 * starts it again on the same store, runtime dir and port (its log is
 * appended to serve.log) and waits for it to answer. */
void e2e_serve_stop(e2e_t *t);
bool e2e_serve_start(e2e_t *t);

/* One HTTP request; body may be NULL. Called `on_data` (if set) for every
 * received piece: returning false aborts the transfer (a client that goes
 * away). */
typedef bool (*e2e_on_data_fn)(void *ctx, const char *data, size_t len);
e2e_resp_t e2e_http(e2e_t *t, const char *method, const char *path,
                    const char *body, e2e_on_data_fn on_data, void *ctx);
void e2e_resp_free(e2e_resp_t *r);

/* A request run by a thread of its own: a client that stays while the
 * test does other things and can be asked what the stream brought so far. */
typedef struct e2e_bg {
    e2e_t *at;
    char *req_body;     /* owned copy; NULL: none */
    const char *method; /* borrowed: a literal */
    const char *path;   /* borrowed: a literal */
    pthread_t th;
    pthread_mutex_t mu;
    char seen[1 << 16]; /* the stream so far (its tail when long) */
    size_t len;
    long status;        /* set by e2e_bg_join */
    char *body;         /* set by e2e_bg_join; owned: free() it */
} e2e_bg_t;

/* Starts `method path` with body (may be NULL; copied) to at in a thread. */
void e2e_bg_start(e2e_bg_t *b, e2e_t *at, const char *method, const char *path,
                  const char *body);

/* True once needle has come in the stream. */
bool e2e_bg_saw(e2e_bg_t *b, const char *needle);

/* Waits for the request to end; b->status and b->body hold its answer. */
void e2e_bg_join(e2e_bg_t *b);

/* Runs the CLI with args (NULL-terminated); captures stdout into *out
 * (owned, may be NULL) and returns the exit status. stdin is /dev/null
 * unless `input` is given. */
int e2e_cli(e2e_t *t, const char *input, char **out, ...);

/* e2e_cli, and the CLI's stderr into *err_out (owned). */
int e2e_cli_err(e2e_t *t, const char *input, char **out, char **err_out, ...);

/* Runs the CLI on a pseudo-terminal of `cols` columns and 40 rows (stdin,
 * stdout and stderr all the terminal, as a user's shell gives): `input`
 * (may be NULL) is typed at once; *out (owned) gets everything the
 * terminal showed, escape sequences included. Exit status, -1 when no
 * terminal could be made. */
int e2e_cli_pty(e2e_t *t, const char *input, int cols, char **out, ...);

/* Runs a program from bin_dir with args (NULL-terminated); exit status. */
int e2e_run_bin(e2e_t *t, const char *prog, ...);

/* PIDs of running processes named `comm` that descend from serve. */
/* The parent of pid from /proc/PID/stat, and its name in comm (cap bytes;
 * NULL: not wanted); -1 when pid is gone. */
pid_t e2e_parent_of(pid_t pid, char *comm, size_t cap);
size_t e2e_find_procs(e2e_t *t, const char *comm, pid_t *out, size_t cap);

/* Lines of the services' log (<tmp>/serve.log) that contain needle. */
size_t e2e_log_count(const e2e_t *t, const char *needle);

/* Prints the last n lines of the services' log to stderr (for a failed
 * test's report). */
void e2e_log_tail(const e2e_t *t, int n);

/* Bytes the store's part state files of blob hex (a download under way or
 * stopped) say are in place; 0 when there are none. */
long long e2e_blob_part_completed(const e2e_t *t, const char *hex);

/* Writes text to path (replacing it); false on failure. */
bool e2e_write_file(const char *path, const char *text);

/* `corral create NAME -f <tmp>/Modelfile` with modelfile as that file's
 * text (so `FROM ./x.gguf` names a file in t->tmp). True on success; on
 * failure the CLI's exit status and output go to stderr. */
bool e2e_create(e2e_t *t, const char *name, const char *modelfile);

/* A synthetic model named `name`: corral-gguf-synth --out <tmp>/<name>.gguf
 * with the given options (NULL-terminated), then e2e_create with
 * "FROM ./<name>.gguf\n" + modelfile_tail (may be NULL). True on success. */
bool e2e_synth_create(e2e_t *t, const char *name, const char *modelfile_tail, ...);

/* The value at a dotted path ("choices.0.message.content": array indices
 * as numbers) in o, or NULL; borrowed. */
json_t *e2e_jget(json_t *o, const char *path);

/* The string at a dotted path, or "(absent)" (for CHECK_EQ_STR). */
const char *e2e_jstr(json_t *o, const char *path);

/* Parses a server-sent event stream: a JSON array (owned) of one object
 * per event, {"event": its name (absent without one), "data": the data
 * line parsed as JSON (its text when it is not JSON)}; comments are left
 * out. */
json_t *e2e_sse(const char *body);

/* Parses NDJSON: returns a JSON array of the lines' objects (owned). */
json_t *e2e_ndjson(const char *body);

#endif
