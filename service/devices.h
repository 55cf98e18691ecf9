/*
 * service/devices.h - the devices behind one server, as the loop sees them
 * (issue 57 part 3): each worker's name ("cpu:1", "cuda:0"), whether it is
 * still up, why it was taken out, and its counters for /metrics.
 *
 * Why a table of its own: a failed device changes what /readyz says, what
 * the gate accepts and what /metrics shows, and each of those reads the
 * same few facts; the workers post the news (mailbox), the loop applies it
 * here, and nothing else in the server keeps per-device state.  The fault
 * switch (TESSERA_FAULT_DEVICE, docs/multi-gpu.md) is parsed here too, once
 * at start, from the environment only: nothing a request carries reaches it.
 *
 * Owner: the loop thread (like svc_metrics); svc_devices_parse_fault runs
 * before the workers start.
 */
#ifndef SVC_DEVICES_H
#define SVC_DEVICES_H

#include <stdbool.h>
#include <stdint.h>

#include <stddef.h>

#include <cjson/cJSON.h>

struct evbuffer;

typedef struct svc_device {
    char name[64];          /* "cpu:0", "cuda:1": unique within the server */
    bool up;                /* false once taken out (failed) */
    char reason[256];       /* why it was taken out */
    double busy_seconds;    /* wall time inside UNet steps */
    uint64_t calls;         /* UNet calls */
    uint64_t images;        /* images summed over those calls */
    uint64_t failures;      /* times taken out (0 or 1 today), or failed steps */
    uint64_t requeued;      /* its unfinished images handed back to the queue */
    uint64_t cfg_calls;     /* of its UNet calls, those made as a rank of a CFG pair */
} svc_device;

typedef struct svc_devices {
    svc_device *v;
    int n;
    double since_mono;      /* when the table was made (the busy fraction's base) */
} svc_devices;

/* Names for the devices of --device (names[i] as given): "cpu" entries are
 * numbered in order ("cpu:0", "cpu:1"), the others keep their name, and a
 * repeated name gets "#k".  0, or -1 out of memory. */
int svc_devices_init(svc_devices *d, char *const *names, int n);
void svc_devices_free(svc_devices *d);
/* Devices still up. */
int svc_devices_up(const svc_devices *d);
/* Prometheus lines: tessera_device_up, _busy_seconds_total,
 * _busy_fraction, _calls_total, _images_total, _images_per_call,
 * _failures_total, _requeued_images_total. */
void svc_devices_metrics(const svc_devices *d, struct evbuffer *out);
/* [{"name","state":"up"|"failed","reason"?}, ...] */
cJSON *svc_devices_json(const svc_devices *d);

/* TESSERA_FAULT_DEVICE="NAME@after_calls=N[,NAME@after_calls=N...]": the
 * device NAME fails, as with a sticky device error, at the first step it
 * starts once it has made N UNet calls (a step makes one call per shape
 * and kind it holds, so N+1 and later are not made).  Returns the UNet calls after which device `name` fails
 * (-1: never).  `spec` NULL: no fault.  A malformed spec is an error
 * (-2, with the reason in err). */
int svc_devices_fault_after(const char *spec, const char *name, char *err, size_t err_size);

#endif
