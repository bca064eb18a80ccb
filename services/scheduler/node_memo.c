/* node_memo.c: the names of the nodes that hold runners, kept in a file
 * (cfg.node_memo, in the runtime dir) so that a restarted scheduler knows
 * whom to wait for.
 *
 * A local runner that outlived its scheduler is found in /proc (adopt.c).
 * A node's runner is invisible until its agent connects again: a TCP
 * reconnect, a CURVE handshake, node_hello, then the runner's relayed
 * hello. A request arriving in between would load a second copy of a
 * model a node still holds (seen in CI: a chat 0.1 s after a restart was
 * loaded on the scheduler's host, and the node's adopted runner was then
 * stopped as the duplicate). With the memo, the adoption grace also waits
 * for every node it names to join (whose node_hello then counts its
 * runners, adopt.c), at most the grace. The file is written after the
 * runner list changed (not per housekeeping: a node's relayed tokens run
 * it once each), never while the grace still waits (a second crash then must
 * not forget the nodes), and removed by a clean stop, which stops every
 * runner. It does not decide anything on its own: a node it names that
 * never comes back costs one grace, once. */
#include "lib/prelude.h"
#include "services/scheduler/sched_int.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "lib/log.h"

/* A node name from the file: what node_hello allows, printable. */
static bool usable_name(const char *name, size_t len)
{
    if (len == 0 || len >= sizeof(((sch_node_t *)0)->name))
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)name[i] < 0x21 || name[i] == 0x7f)
            return false;
    return true;
}

int sch_node_memo_read(sch_server_t *s)
{
    s->n_memo_nodes = 0;
    if (!s->cfg.node_memo[0])
        return 0;
    FILE *f = fopen(s->cfg.node_memo, "re");
    if (!f) {
        if (errno != ENOENT)
            cr_log_warn("cannot read %s: %s", s->cfg.node_memo, strerror(errno));
        return 0;
    }
    char line[256];
    while (s->n_memo_nodes < NODE_MEMO_MAX && fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\r\n");
        line[len] = '\0';
        if (!usable_name(line, len)) {
            if (len)
                cr_log_warn("%s: line '%.64s' is not a node name; ignored",
                            s->cfg.node_memo, line);
            continue;
        }
        memcpy(s->memo_nodes[s->n_memo_nodes++], line, len + 1); /* < 64 */
    }
    fclose(f);
    return s->n_memo_nodes;
}

static bool joined(const sch_server_t *s, const char *name)
{
    for (const sch_node_t *nd = s->node_list; nd; nd = nd->next)
        if (!strcmp(nd->name, name))
            return true;
    return false;
}

int sch_node_memo_missing(const sch_server_t *s, char *names, size_t cap)
{
    int n = 0;
    size_t used = 0;
    if (cap)
        names[0] = '\0';
    for (int i = 0; i < s->n_memo_nodes; i++) {
        if (joined(s, s->memo_nodes[i]))
            continue;
        n++;
        if (cap && used < cap) {
            int w = snprintf(names + used, cap - used, "%s'%s'", used ? ", " : "",
                             s->memo_nodes[i]);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    return n;
}

void sch_node_memo_forget(sch_server_t *s)
{
    s->n_memo_nodes = 0;
    s->memo_stale = true; /* the file says what was: write what is */
}

/* "name\n" for each node with a runner, in node_list order. */
static void memo_text(const sch_server_t *s, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (const sch_node_t *nd = s->node_list; nd; nd = nd->next) {
        bool holds = false;
        for (const runner_t *rn = s->runner_list; rn && !holds; rn = rn->next)
            holds = rn->node == nd;
        if (!holds)
            continue;
        int w = snprintf(out + used, cap - used, "%s\n", nd->name);
        if (w < 0 || (size_t)w >= cap - used)
            break; /* full: the nodes that fit are still waited for */
        used += (size_t)w;
    }
}

void sch_node_memo_write(sch_server_t *s)
{
    if (!s->memo_stale || !s->cfg.node_memo[0] || s->grace_until_ms)
        return;
    s->memo_stale = false;
    char text[NODE_MEMO_MAX * 65];
    memo_text(s, text, sizeof text);
    bool ok;
    if (!text[0]) {
        ok = unlink(s->cfg.node_memo) == 0 || errno == ENOENT;
    } else {
        /* Whole or not at all: a crash while writing leaves the old one. */
        char tmp[sizeof s->cfg.node_memo + 8];
        snprintf(tmp, sizeof tmp, "%s.new", s->cfg.node_memo);
        FILE *f = fopen(tmp, "we");
        ok = f && fputs(text, f) >= 0;
        ok = (f && fclose(f) == 0) && ok;
        ok = ok && rename(tmp, s->cfg.node_memo) == 0;
        if (!ok)
            unlink(tmp);
    }
    if (!ok)
        cr_log_warn("cannot write %s: %s (a restart of this scheduler may "
                    "not wait for its nodes)",
                    s->cfg.node_memo, strerror(errno));
}

void sch_node_memo_remove(sch_server_t *s)
{
    if (s->cfg.node_memo[0] && unlink(s->cfg.node_memo) && errno != ENOENT)
        cr_log_warn("cannot remove %s: %s", s->cfg.node_memo, strerror(errno));
}
