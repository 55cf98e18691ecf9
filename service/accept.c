/*
 * service/accept.c - taking jobs in: svc_server_accept and the cluster's
 * accepts (server_int.h).
 *
 * A job is answered 202 only once it is durable: alone, its ACCEPT record
 * goes to the journal (fsync on the storage thread, store.h) and the job
 * enters the table and the queue when TASK_DONE comes back; with --queue
 * the shared Redis stream is the journal (one MULTI per request).  Until
 * then the jobs wait in a pending_accept, so that the cluster's follower,
 * which may read this node's own accept from the stream first, neither
 * mirrors them twice nor applies their events before them: those events
 * are kept and replayed in order when the accept ends.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "server_int.h"
#include "util.h"

typedef struct pending_accept {
    svc_job **jobs;
    int *stream_pos;   /* --queue: the accept event's position, once the
                        * follower read it before the accept ended; else -1 */
    int n, images;
    svc_msg *deferred, *deferred_tail; /* --queue: the follower's messages
                                        * for these jobs, read before the
                                        * accept ended (replayed, in order) */
    void (*done)(void *user, int status);
    void *user;
    struct pending_accept *next; /* s->accepting */
} pending_accept;

/* The pending accept of job `id` (NULL if none). */
static pending_accept *accepting_of(svc_server *s, uint64_t id)
{
    for (pending_accept *pa = s->accepting; pa; pa = pa->next)
        for (int i = 0; i < pa->n; i++)
            if (pa->jobs[i]->id == id)
                return pa;
    return NULL;
}

/* --queue: a follower message (started, step, tiles, ...) for a job whose
 * accept has not ended here yet is kept for svc_server_accept_done, so
 * that this node applies the job's events in the stream's order like every
 * other api node (the message's owned fields move to the copy). */
bool svc_server_defer_for_accept(svc_server *s, svc_msg *m)
{
    if (!svc_msg_is_image_news(m->type) && m->type != SVC_MSG_CLUSTER_CANCEL)
        return false;
    pending_accept *pa = accepting_of(s, m->job);
    svc_msg *copy = pa ? malloc(sizeof *copy) : NULL;
    if (!copy)
        return false;
    *copy = *m;
    copy->next = NULL;
    m->text = NULL;
    m->tiles = NULL;
    if (pa->deferred_tail)
        pa->deferred_tail->next = copy;
    else
        pa->deferred = copy;
    pa->deferred_tail = copy;
    return true;
}

/* Whether job `id` is being accepted here (the cluster's follower may
 * see it in the event stream before the accept completes); its `queued`
 * position is kept for svc_server_accept_done. */
static bool accepting(svc_server *s, uint64_t id, int pos)
{
    for (pending_accept *pa = s->accepting; pa; pa = pa->next)
        for (int i = 0; i < pa->n; i++)
            if (pa->jobs[i]->id == id) {
                pa->stream_pos[i] = pos;
                return true;
            }
    return false;
}

void svc_server_accept(svc_server *s, svc_job **jobs, int n, void (*done)(void *user, int status),
                       void *user)
{
    pending_accept *pa = calloc(1, sizeof *pa);
    char **payloads = calloc((size_t)n, sizeof *payloads);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    svc_job **copy = calloc((size_t)n, sizeof *copy);
    int *stream_pos = malloc((size_t)n * sizeof *stream_pos);
    bool ok = pa && payloads && lens && copy && stream_pos;
    for (int i = 0; ok && i < n; i++) {
        payloads[i] = svc_job_accept_record(jobs[i]);
        ok = payloads[i] != NULL;
        if (ok)
            lens[i] = strlen(payloads[i]);
    }
    if (!ok) {
        if (payloads)
            for (int i = 0; i < n; i++)
                free(payloads[i]);
        free(payloads);
        free(lens);
        free(copy);
        free(stream_pos);
        free(pa);
        for (int i = 0; i < n; i++)
            svc_job_free(jobs[i]);
        done(user, -ENOMEM);
        return;
    }
    memcpy(copy, jobs, (size_t)n * sizeof *copy);
    pa->jobs = copy;
    pa->stream_pos = stream_pos;
    for (int i = 0; i < n; i++)
        stream_pos[i] = -1;
    pa->n = n;
    for (int i = 0; i < n; i++)
        pa->images += jobs[i]->n;
    pa->done = done;
    pa->user = user;
    s->pending_images += pa->images;
    if (s->cluster) {
        pa->next = s->accepting;
        s->accepting = pa;
        /* the queue is the journal: MULTI, XADD per image, EXEC */
        char **ids = calloc((size_t)n, sizeof *ids);
        int *images = calloc((size_t)n, sizeof *images);
        for (int i = 0; ids && images && i < n; i++) {
            ids[i] = strdup(jobs[i]->ids);
            images[i] = jobs[i]->n;
        }
        free(lens);
        if (!ids || !images) {
            free(ids);
            free(images);
            for (int i = 0; i < n; i++)
                free(payloads[i]);
            free(payloads);
            svc_msg *m = svc_msg_new(SVC_MSG_TASK_DONE);
            if (m) {
                m->cookie = pa;
                m->status = -ENOMEM;
            }
            svc_mailbox_post(s->mailbox, m);
            return;
        }
        svc_cluster_accept(s->cluster, ids, images, payloads, n, pa);
        return;
    }
    svc_store_journal(s->store, payloads, lens, n, pa);
}

void svc_server_accept_done(svc_server *s, pending_accept *pa, int status)
{
    s->pending_images -= pa->images;
    for (pending_accept **pp = &s->accepting; *pp; pp = &(*pp)->next)
        if (*pp == pa) {
            *pp = pa->next;
            break;
        }
    if (status < 0) {
        for (int i = 0; i < pa->n; i++) {
            if (pa->jobs[i]->batch)
                pa->jobs[i]->batch->n = 0; /* the batch never was */
            svc_job_free(pa->jobs[i]);
        }
    } else {
        for (int i = 0; i < pa->n; i++) {
            svc_jobs_insert(s->jobs, pa->jobs[i]);
            svc_job_enqueue(s, pa->jobs[i]);
            /* --queue: the follower read the accept first */
            if (pa->stream_pos[i] >= 0)
                svc_job_queued_event(s, pa->jobs[i], pa->stream_pos[i]);
        }
        svc_jobs_update_positions(s);
    }
    pa->done(pa->user, status < 0 ? status : 0);
    for (svc_msg *m = pa->deferred, *next; m; m = next) {
        next = m->next;
        if (status >= 0)
            svc_server_on_msg(s, m);
        svc_msg_free(m);
    }
    free(pa->jobs);
    free(pa->stream_pos);
    free(pa);
}


/* A job accepted by any api node (the cluster's event stream): the job
 * table mirrors it, and its first event, `queued`, is emitted now, from the
 * stream, on every api node (docs/scale-out.md: same event ids everywhere).
 * Jobs this node accepted only get that event; jobs it already has (loaded
 * finished from --data-dir) nothing. */
void svc_server_cluster_accept(svc_server *s, uint64_t id, const char *rec, int pos)
{
    svc_job *known = svc_jobs_find(s->jobs, id);
    if (known) {
        svc_job_queued_event(s, known, pos);
        return;
    }
    if (!rec || accepting(s, id, pos))
        return;
    char err[128];
    cJSON *o = svc_json_parse(rec, strlen(rec), err, sizeof err);
    const cJSON *req = o ? cJSON_GetObjectItemCaseSensitive(o, "request") : NULL;
    const cJSON *created = o ? cJSON_GetObjectItemCaseSensitive(o, "created") : NULL;
    svc_params_ctx ctx;
    memset(&ctx, 0, sizeof ctx); /* checked by the node that accepted it */
    ctx.default_size = s->default_size ? s->default_size : 512;
    ctx.max_size = TSR_MAX_SIZE;
    svc_params *p = NULL;
    svc_param_error pe;
    if (!req || svc_params_parse(req, NULL, &ctx, &p, &pe) < 0) {
        SVC_WARN("cluster: an accepted job cannot be read (%s); not mirrored",
                 o ? pe.message : err);
        cJSON_Delete(o);
        return;
    }
    svc_job *j = svc_job_new(id, p, cJSON_IsNumber(created) ? created->valuedouble
                                                            : svc_now_unix());
    if (!j) {
        cJSON_Delete(o);
        svc_params_unref(p);
        return;
    }
    const cJSON *owner = cJSON_GetObjectItemCaseSensitive(o, "owner");
    svc_job_set_owner(j, cJSON_IsString(owner) ? owner->valuestring : NULL);
    svc_jobs_insert(s->jobs, j);
    /* a batch's jobs are accepted in one MULTI, so they arrive together */
    const cJSON *batch = cJSON_GetObjectItemCaseSensitive(o, "batch");
    const cJSON *bi = cJSON_GetObjectItemCaseSensitive(o, "batch_index");
    uint64_t bid = 0;
    if (cJSON_IsString(batch) && svc_id_parse(batch->valuestring, 'b', &bid)) {
        svc_batch *b = svc_jobs_find_batch(s->jobs, bid);
        if (!b)
            b = svc_batch_new(s->jobs, bid, j->created);
        if (b)
            svc_batch_add(b, j, cJSON_IsNumber(bi) ? (int)bi->valuedouble : b->n);
    }
    cJSON_Delete(o);
    svc_job_enqueue(s, j);
    svc_job_queued_event(s, j, pos);
}
