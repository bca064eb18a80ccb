/* sd_notify.h: tell the service manager that a service is ready, stopping,
 * or what it is doing, with systemd's notification protocol.
 *
 * The protocol is one AF_UNIX datagram of newline-separated KEY=VALUE
 * assignments sent to the socket named by $NOTIFY_SOCKET: an absolute path,
 * or a name in the abstract namespace written with a leading '@'. This
 * module speaks it directly (no libsystemd). When $NOTIFY_SOCKET is unset or
 * empty (started by hand, by `corral serve`, in a container) every function
 * is a no-op that returns CR_OK.
 *
 * It does not unset $NOTIFY_SOCKET: the scheduler's runners inherit it, and
 * systemd ignores their messages under the default NotifyAccess=main.
 * It never prints; callers log a failure and go on serving. */
#ifndef CR_SD_NOTIFY_H
#define CR_SD_NOTIFY_H

#include "lib/prelude.h"
#include "lib/status.h"

/* Longest message sent, in bytes (systemd reads up to several KiB). */
#define CR_SD_NOTIFY_MAX 4096

/* Longest STATUS= text sent, in bytes; longer text is cut at a character
 * boundary. */
#define CR_SD_NOTIFY_STATUS_MAX 1024

/* True when $NOTIFY_SOCKET is set and non-empty. */
bool cr_sd_notify_enabled(void);

/* Sends `state` (one or more "KEY=VALUE" lines, e.g. "READY=1") as one
 * datagram. CR_OK without sending when $NOTIFY_SOCKET is unset or empty.
 * Errors: CR_E_INVALID (empty state, "@" with no name), CR_E_TOO_LARGE
 * (state over CR_SD_NOTIFY_MAX, socket path over what sockaddr_un holds),
 * CR_E_UNSUPPORTED (an address that is neither "/path" nor "@name", such as
 * systemd's "vsock:"), CR_E_IO (socket or send failed: no listener, a stream
 * socket at that path). err may be NULL. */
cr_status_t cr_sd_notify(const char *state, cr_err_t *err);

/* "READY=1": call once the service's sockets are bound and it serves. */
cr_status_t cr_sd_notify_ready(cr_err_t *err);

/* "STOPPING=1": call when a stop was asked for (SIGTERM), before draining. */
cr_status_t cr_sd_notify_stopping(cr_err_t *err);

/* "STATUS=<text>": a one-line status shown by `systemctl status`. Control
 * characters (a newline would start another assignment) become spaces; text
 * past CR_SD_NOTIFY_STATUS_MAX bytes is cut. NULL sends an empty status. */
cr_status_t cr_sd_notify_status(const char *text, cr_err_t *err);

#endif
