/*
 * service/devices.c - see devices.h.
 *
 * The images-per-call figure is given as a sum and a count (a Prometheus
 * summary without quantiles) per device: the server-wide histogram
 * (tessera_unet_batch_images) already has the buckets, and per-device
 * buckets would multiply the series by the devices for little gain.  Busy
 * time is a counter (rate() gives the fraction over any window) plus a
 * gauge of the fraction since start, for a glance without a query.
 */
#include "devices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "clock.h"

int svc_devices_init(svc_devices *d, char *const *names, int n)
{
    memset(d, 0, sizeof *d);
    d->v = calloc((size_t)(n > 0 ? n : 1), sizeof *d->v);
    if (!d->v)
        return -1;
    d->n = n;
    d->since_mono = svc_now_mono();
    int cpu = 0;
    for (int i = 0; i < n; i++) {
        svc_device *v = &d->v[i];
        v->up = true;
        if (strcmp(names[i], "cpu") == 0)
            snprintf(v->name, sizeof v->name, "cpu:%d", cpu++);
        else
            snprintf(v->name, sizeof v->name, "%.56s", names[i]);
        for (char *c = v->name; *c; c++)
            if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
                *c = '_'; /* a label value and JSON: nothing to escape */
        int same = 0;
        for (int k = 0; k < i; k++)
            same += strncmp(d->v[k].name, v->name, strlen(v->name)) == 0 &&
                    (d->v[k].name[strlen(v->name)] == '\0' || d->v[k].name[strlen(v->name)] == '#');
        if (same > 0) {
            char base[64];
            snprintf(base, sizeof base, "%s", v->name);
            snprintf(v->name, sizeof v->name, "%.56s#%d", base, same);
        }
    }
    return 0;
}

void svc_devices_free(svc_devices *d)
{
    free(d->v);
    memset(d, 0, sizeof *d);
}

int svc_devices_up(const svc_devices *d)
{
    int up = 0;
    for (int i = 0; i < d->n; i++)
        up += d->v[i].up;
    return up;
}

/* A label value: names are ours ("cpu:0", "cuda:1", an --device token
 * without quotes or backslashes, checked by the parser), printed as is. */
static void family(struct evbuffer *out, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void svc_devices_metrics(const svc_devices *d, struct evbuffer *out)
{
    if (d->n == 0)
        return;
    const double up_for = svc_now_mono() - d->since_mono;
    family(out, "tessera_device_up", "gauge", "1 while the device takes work, 0 once taken out");
    for (int i = 0; i < d->n; i++)
        evbuffer_add_printf(out, "tessera_device_up{device=\"%s\"} %d\n", d->v[i].name,
                            d->v[i].up ? 1 : 0);
    family(out, "tessera_device_busy_seconds_total", "counter",
           "Wall seconds the device spent in UNet steps");
    for (int i = 0; i < d->n; i++)
        evbuffer_add_printf(out, "tessera_device_busy_seconds_total{device=\"%s\"} %.6f\n",
                            d->v[i].name, d->v[i].busy_seconds);
    family(out, "tessera_device_busy_fraction", "gauge",
           "Busy seconds over the seconds since the server started");
    for (int i = 0; i < d->n; i++)
        evbuffer_add_printf(out, "tessera_device_busy_fraction{device=\"%s\"} %.6f\n",
                            d->v[i].name, up_for > 0 ? d->v[i].busy_seconds / up_for : 0.0);
    family(out, "tessera_device_images_per_call", "summary",
           "Images in each UNet call of the device (sum and count)");
    for (int i = 0; i < d->n; i++) {
        evbuffer_add_printf(out, "tessera_device_images_per_call_sum{device=\"%s\"} %llu\n",
                            d->v[i].name, (unsigned long long)d->v[i].images);
        evbuffer_add_printf(out, "tessera_device_images_per_call_count{device=\"%s\"} %llu\n",
                            d->v[i].name, (unsigned long long)d->v[i].calls);
    }
    family(out, "tessera_device_cfg_calls_total", "counter",
           "UNet calls the device made as a rank of a CFG-parallel pair (--parallel)");
    for (int i = 0; i < d->n; i++)
        evbuffer_add_printf(out, "tessera_device_cfg_calls_total{device=\"%s\"} %llu\n",
                            d->v[i].name, (unsigned long long)d->v[i].cfg_calls);
    family(out, "tessera_device_failures_total", "counter",
           "Times the device was taken out (sticky error, repeated out of memory, fault switch)");
    for (int i = 0; i < d->n; i++)
        evbuffer_add_printf(out, "tessera_device_failures_total{device=\"%s\"} %llu\n",
                            d->v[i].name, (unsigned long long)d->v[i].failures);
    family(out, "tessera_device_requeued_images_total", "counter",
           "Unfinished images of a failed device handed back to the queue (rerun from the start)");
    for (int i = 0; i < d->n; i++)
        evbuffer_add_printf(out, "tessera_device_requeued_images_total{device=\"%s\"} %llu\n",
                            d->v[i].name, (unsigned long long)d->v[i].requeued);
}

cJSON *svc_devices_json(const svc_devices *d)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < d->n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddStringToObject(o, "name", d->v[i].name);
        cJSON_AddStringToObject(o, "state", d->v[i].up ? "up" : "failed");
        if (!d->v[i].up)
            cJSON_AddStringToObject(o, "reason", d->v[i].reason);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

int svc_devices_fault_after(const char *spec, const char *name, char *err, size_t err_size)
{
    if (!spec || !spec[0])
        return -1;
    int found = -1;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[128];
        if (len == 0 || len >= sizeof item) {
            snprintf(err, err_size, "TESSERA_FAULT_DEVICE: '%.*s' is not NAME@after_calls=N",
                     (int)(len < 100 ? len : 100), p);
            return -2;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        char *at = strchr(item, '@');
        const char *key = "after_calls=";
        char *num = at ? at + 1 : NULL;
        if (!at || at == item || strncmp(num, key, strlen(key)) != 0) {
            snprintf(err, err_size, "TESSERA_FAULT_DEVICE: '%s' is not NAME@after_calls=N", item);
            return -2;
        }
        num += strlen(key);
        char *stop = NULL;
        long n = strtol(num, &stop, 10);
        if (!num[0] || *stop || n < 0 || n > 1000000000L) {
            snprintf(err, err_size,
                     "TESSERA_FAULT_DEVICE: after_calls in '%s' must be a whole number "
                     "0..1000000000",
                     item);
            return -2;
        }
        *at = '\0';
        if (strcmp(item, name) == 0)
            found = (int)n;
        p = end ? end + 1 : p + len;
    }
    return found;
}
