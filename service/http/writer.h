/*
 * service/http/writer.h - the output side of a connection's filter
 * bufferevent (the head guard's, guard.c): bytes evhttp queues go to the
 * socket from the loop, and evhttp hears "drained" only once the kernel
 * has every byte (see writer.c for why).
 *
 * Owner: the guard, which embeds one per connection and frees it with the
 * connection (svc_writer_free from the filter's free callback).
 */
#ifndef SVC_WRITER_H
#define SVC_WRITER_H

#include <event2/bufferevent.h>

struct event;

typedef struct svc_writer {
    struct bufferevent *bev; /* the filter (borrowed) */
    struct event *kick;      /* flushes output evhttp queued (see on_output) */
    struct event *writable;  /* the socket can take more output (see on_kick) */
    void (*written)(void *arg); /* all of the output reached the kernel */
    void *arg;
} svc_writer;

/* Start moving f's output; 0, or -1 (out of memory). */
int svc_writer_init(svc_writer *w, struct bufferevent *f, void (*written)(void *), void *arg);
void svc_writer_free(svc_writer *w);
/* The filter's output callback: keeps the bytes (on_kick writes them). */
enum bufferevent_filter_result svc_writer_filter(struct evbuffer *src, struct evbuffer *dst,
                                                 ev_ssize_t limit,
                                                 enum bufferevent_flush_mode mode, void *ctx);

#endif
