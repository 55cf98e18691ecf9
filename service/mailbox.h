/*
 * service/mailbox.h - how other threads talk to the event loop.
 *
 * Workers and the storage thread never touch the loop's state (job table,
 * SSE clients, metrics).  They post small messages here; posting appends
 * under a mutex and calls event_active on a libevent user event (the base
 * is made notifiable with evthread_use_pthreads), which wakes the loop.  The
 * loop takes the whole list in one swap and applies it in order.  No
 * polling, and a post never blocks on the loop.
 *
 * Owner: the list belongs to the mailbox (mutex); a message belongs to the
 * poster until posted, then to the loop, which frees it.
 */
#ifndef SVC_MAILBOX_H
#define SVC_MAILBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

typedef enum svc_msg_type {
    SVC_MSG_ENGINE_READY,   /* worker: engine open (worker) */
    SVC_MSG_ENGINE_FAILED,  /* worker: engine could not open (text) */
    SVC_MSG_IMAGE_STARTED,  /* worker: took an image (job, index, worker) */
    SVC_MSG_IMAGE_STEP,     /* worker: progress (job, index, step, steps) */
    SVC_MSG_IMAGE_STORED,   /* storage: PNG durable (job, index, etag, bytes, text=infotext) */
    SVC_MSG_IMAGE_FAILED,   /* worker/storage: (job, index, status, text=message) */
    SVC_MSG_IMAGE_CANCELLED,/* worker: left its batch cancelled (job, index) */
    SVC_MSG_UNET_CALL,      /* worker: one UNet call (images, seconds) */
    SVC_MSG_WORKER_EXIT,    /* worker: thread ending (worker) */
    SVC_MSG_TASK_DONE,      /* storage: a task with a cookie finished (cookie, status) */
    SVC_MSG_TILES,          /* tile encoder: tiles published (job, index, step, tiles) */
    SVC_MSG_CLUSTER_ACCEPT, /* cluster follower: a job accepted by any api node (text=record,
                               images=its position in the shared queue) */
    SVC_MSG_CLUSTER_CANCEL, /* cluster follower: a job cancelled on any api node (job) */
    SVC_MSG_DEVICE_STEP,    /* worker: one tsr_batch_step's wall time (seconds) */
    SVC_MSG_DEVICE_FAILED,  /* worker: its device is taken out (status, text=reason) */
    SVC_MSG_IMAGE_REQUEUED, /* worker: a failed device's image is back in the queue (job, index) */
} svc_msg_type;

struct svc_tileset;

typedef struct svc_msg {
    svc_msg_type type;
    int worker;
    uint64_t job;
    int index;
    int step, steps;
    int status;
    int images;
    int ranks;           /* UNET_CALL: devices the call's rows were split over (CFG-parallel:
                            2; 0 or 1 alone) */
    double seconds;
    size_t bytes;
    char etag[33];
    char *text;          /* owned by the message */
    void *cookie;        /* TASK_DONE: the poster's */
    struct svc_tileset *tiles; /* TILES: owned by the message until the loop takes it */
    struct svc_msg *next;
} svc_msg;

/* A message about one image of a job (started, step, stored, failed,
 * cancelled, tiles): what a worker role forwards to Redis and what waits
 * for a pending accept (accept.c, dispatch.c). */
static inline bool svc_msg_is_image_news(svc_msg_type type)
{
    return type == SVC_MSG_IMAGE_STARTED || type == SVC_MSG_IMAGE_STEP ||
           type == SVC_MSG_IMAGE_STORED || type == SVC_MSG_IMAGE_FAILED ||
           type == SVC_MSG_IMAGE_CANCELLED || type == SVC_MSG_TILES;
}

typedef struct svc_mailbox svc_mailbox;
typedef void (*svc_mailbox_fn)(void *user, svc_msg *msg);

/* fn runs on the loop for every message (it must not free msg). */
svc_mailbox *svc_mailbox_new(struct event_base *base, svc_mailbox_fn fn, void *user);
void svc_mailbox_free(svc_mailbox *mb);
/* Any thread.  Takes ownership of msg (malloc'd).  A NULL msg is a no-op. */
void svc_mailbox_post(svc_mailbox *mb, svc_msg *msg);
/* calloc'd message of a type; NULL on out of memory. */
svc_msg *svc_msg_new(svc_msg_type type);
void svc_msg_free(svc_msg *m);

#endif
