/*
 * service/worker_int.h - a worker's state, shared by service/worker.c (the
 * worker's loop) and service/pair.c (the same thread following its CFG
 * partner).  Not used elsewhere: the rest of the server sees worker.h.
 */
#ifndef SVC_WORKER_INT_H
#define SVC_WORKER_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "pair.h"
#include "worker.h"

#define MAX_SLOTS 64

/* An image in this worker's batch. */
typedef struct slot {
    int batch_image;   /* its id in this worker's tsr_batch (tsr_batch_submit) */
    uint64_t job_id;   /* the service job it belongs to (svc_job.id) */
    int index;         /* its index in that job */
    int width, height;
    int last_step;
    int evals;         /* UNet evaluations so far: the version of its next preview */
    int pending;       /* FAILED with a device-level status (TSR_ERR_BACKEND, _NOMEM):
                          finished or requeued once the step has returned (0: not) */
    svc_params *params;/* one reference: to requeue it should the device fail */
    char owner[64];    /* its key (fair turns), for the same */
} slot;

struct svc_worker {
    svc_worker_config cfg;
    pthread_t thread;
    bool started;
    _Atomic(tsr_engine *) engine; /* set once open */
    atomic_int opened;            /* 0 opening, 1 open, -1 failed (share_from waits on it) */
    tsr_batch *batch;             /* worker thread only */
    slot slots[MAX_SLOTS];        /* worker thread only, oldest first */
    int n_slots;
    uint64_t calls;               /* UNet calls made (preview cadence) */
    int oom_in_a_row;             /* failed steps out of memory, in a row */
    bool failed;                  /* the device is taken out (worker thread) */
    bool leading;                 /* leads its CFG pair now (worker thread) */
    atomic_bool gone;             /* the same, for other threads: cancels are not kept */
    int preview_mode;             /* the mode set on the batch now */
    atomic_bool abort;
    pthread_mutex_t mu;           /* guards the cancel list */
    uint64_t *cancels;
    int n_cancels, cap_cancels;
};

/* worker.c, for pair.c */
void svc_worker_post(svc_worker *w, svc_msg *m);
/* Take the device out (DEVICE_FAILED; its images, if any, requeued). */
void svc_worker_take_out(svc_worker *w, int status, const char *reason);
/* The worker's own step callback back on its batch. */
void svc_worker_reset_callback(svc_worker *w);
/* After a step: UNET_CALL and DEVICE_STEP messages for the calls it made
 * (ranks: the devices its calls were split over, 1 alone). */
void svc_worker_report_calls(svc_worker *w, const tsr_batch_stats *before, double seconds,
                             int ranks);

#endif
