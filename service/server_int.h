/*
 * service/server_int.h - the calls between the four files of the server,
 * not for the rest of service/ (which sees server.h).
 *
 * The server is cut by what each part does to svc_server: server.c starts
 * it and runs the loop, accept.c takes jobs in (journal or Redis first,
 * then the job table), dispatch.c applies what other threads post to the
 * mailbox, and drain.c ends it (signals, drain, shutdown).  Each part calls
 * the others only through the names below, all on the loop thread.
 */
#ifndef SVC_SERVER_INT_H
#define SVC_SERVER_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

struct pending_accept;

/* server.c: every engine is open: model facts, replay, "listening on". */
void svc_server_become_ready(svc_server *s);

/* accept.c */
/* --queue: keep a follower message for a job whose accept has not ended
 * here yet (true: m's owned fields moved to the kept copy). */
bool svc_server_defer_for_accept(svc_server *s, svc_msg *m);
/* The journal (or Redis) answered an accept: insert and queue, or drop. */
void svc_server_accept_done(svc_server *s, struct pending_accept *pa, int status);
/* --queue: a job accepted by any api node, read from the event stream. */
void svc_server_cluster_accept(svc_server *s, uint64_t id, const char *rec, int pos);

/* dispatch.c: the mailbox callbacks (svc_mailbox_fn). */
void svc_server_on_msg(void *user, svc_msg *m);
void svc_server_on_work_msg(void *user, svc_msg *m);

/* drain.c */
/* SIGTERM, SIGINT and the drain timer; -1 when out of memory. */
int svc_server_watch_signals(svc_server *s);
/* Start the drain clock (--drain-timeout). */
void svc_server_start_drain_clock(svc_server *s);
void svc_server_begin_drain(svc_server *s, const char *why);
/* Once every worker has ended: flush tiles and the store, then stop. */
void svc_server_maybe_finish_drain(svc_server *s);
void svc_server_stop_loop(svc_server *s);
/* After the loop (or a failed start): end every thread, free everything
 * s owns, and s. */
void svc_server_shutdown(svc_server *s);

#endif
