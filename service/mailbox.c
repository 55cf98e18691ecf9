/*
 * service/mailbox.c - see mailbox.h.
 */
#include "mailbox.h"
#include "tiles.h"

#include <pthread.h>
#include <stdlib.h>

#include <event2/event.h>

struct svc_mailbox {
    pthread_mutex_t mu;
    svc_msg *head, *tail; /* guarded by mu */
    struct event *ev;     /* user event; active = messages waiting */
    svc_mailbox_fn fn;
    void *user;
};

svc_msg *svc_msg_new(svc_msg_type type)
{
    svc_msg *m = calloc(1, sizeof *m);
    if (m)
        m->type = type;
    return m;
}

void svc_msg_free(svc_msg *m)
{
    if (!m)
        return;
    free(m->text);
    svc_tileset_free(m->tiles);
    free(m);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    svc_mailbox *mb = arg;
    pthread_mutex_lock(&mb->mu);
    svc_msg *m = mb->head;
    mb->head = mb->tail = NULL;
    pthread_mutex_unlock(&mb->mu);
    while (m) {
        svc_msg *next = m->next;
        mb->fn(mb->user, m);
        svc_msg_free(m);
        m = next;
    }
}

svc_mailbox *svc_mailbox_new(struct event_base *base, svc_mailbox_fn fn, void *user)
{
    svc_mailbox *mb = calloc(1, sizeof *mb);
    if (!mb)
        return NULL;
    pthread_mutex_init(&mb->mu, NULL);
    mb->fn = fn;
    mb->user = user;
    mb->ev = event_new(base, -1, 0, on_wake, mb);
    if (!mb->ev) {
        pthread_mutex_destroy(&mb->mu);
        free(mb);
        return NULL;
    }
    return mb;
}

void svc_mailbox_free(svc_mailbox *mb)
{
    if (!mb)
        return;
    event_free(mb->ev);
    for (svc_msg *m = mb->head, *next; m; m = next) {
        next = m->next;
        svc_msg_free(m);
    }
    pthread_mutex_destroy(&mb->mu);
    free(mb);
}

void svc_mailbox_post(svc_mailbox *mb, svc_msg *msg)
{
    if (!msg)
        return;
    msg->next = NULL;
    pthread_mutex_lock(&mb->mu);
    if (mb->tail)
        mb->tail->next = msg;
    else
        mb->head = msg;
    mb->tail = msg;
    pthread_mutex_unlock(&mb->mu);
    /* thread-safe with evthread_use_pthreads; activating twice is harmless */
    event_active(mb->ev, 0, 0);
}
