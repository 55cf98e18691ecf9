/*
 * service/server_journal.c - what the server keeps on disk across restarts:
 * the finished jobs' job.json files, the journal of accepted and finished
 * jobs, its replay and compaction at start-up, and the re-queueing of the
 * jobs it left unfinished once the engines can check their parameters.
 *
 * Why it is built this way: a job is journaled (fsync'd on the storage
 * thread) before it is acknowledged, and its final record is written with
 * its job.json, so a crash loses no accepted job.  At start-up every record
 * is read, records are grouped per job (sorted by id, then by order), and
 * only the accepts with no final record and no job.json on disk survive;
 * the journal is rewritten to just those (compaction), so it grows only
 * with the work in flight.  Split from server.c, which keeps the loop,
 * accepting, drain and shutdown.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "server.h"
#include "util.h"

static char *record_text(const char *kind, const svc_job *j)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "record", kind);
    cJSON_AddStringToObject(o, "id", j->ids);
    cJSON_AddNumberToObject(o, "finished", j->finished);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

static void journal_one(svc_server *s, char *text)
{
    char **p = malloc(sizeof *p);
    size_t *l = malloc(sizeof *l);
    if (!text || !p || !l) {
        free(text);
        free(p);
        free(l);
        SVC_ERROR("journal: out of memory for a record");
        return;
    }
    p[0] = text;
    l[0] = strlen(text);
    svc_store_journal(s->store, p, l, 1, NULL);
}

void svc_server_persist_final(svc_server *s, svc_job *j)
{
    if (j->persisted)
        return;
    j->persisted = true;
    cJSON *file = svc_job_file_json(s, j);
    char *text = file ? cJSON_Print(file) : NULL;
    cJSON_Delete(file);
    if (text)
        svc_store_job_file(s->store, j->id, text);
    else
        SVC_ERROR("job %s: out of memory writing job.json", j->ids);
    journal_one(s, record_text(svc_state_name(j->state), j));
}

typedef struct replay_rec {
    uint64_t id;
    size_t order;
    bool final;
    char *payload; /* accept records: the text as journaled */
    cJSON *json;
} replay_rec;

typedef struct replay_state {
    replay_rec *recs;
    size_t n, cap;
    size_t bad;
} replay_state;

static int on_record(void *user, const char *payload, size_t len)
{
    replay_state *st = user;
    char err[128];
    cJSON *o = svc_json_parse(payload, len, err, sizeof err);
    const cJSON *kind = o ? cJSON_GetObjectItemCaseSensitive(o, "record") : NULL;
    const cJSON *idj = o ? cJSON_GetObjectItemCaseSensitive(o, "id") : NULL;
    uint64_t id = 0;
    if (!cJSON_IsString(kind) || !cJSON_IsString(idj) ||
        !svc_id_parse(idj->valuestring, 'j', &id)) {
        st->bad++;
        cJSON_Delete(o);
        return 0;
    }
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 64;
        replay_rec *nr = realloc(st->recs, cap * sizeof *nr);
        if (!nr) {
            cJSON_Delete(o);
            return 1;
        }
        st->recs = nr;
        st->cap = cap;
    }
    replay_rec *r = &st->recs[st->n];
    memset(r, 0, sizeof *r);
    r->id = id;
    r->order = st->n;
    r->final = strcmp(kind->valuestring, "accept") != 0;
    if (!r->final) {
        r->payload = malloc(len + 1);
        if (r->payload) {
            memcpy(r->payload, payload, len);
            r->payload[len] = '\0';
        }
        r->json = o;
    } else {
        cJSON_Delete(o);
    }
    st->n++;
    return 0;
}

static int cmp_rec(const void *a, const void *b)
{
    const replay_rec *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int cmp_order(const void *a, const void *b)
{
    const replay_rec *x = *(replay_rec *const *)a, *y = *(replay_rec *const *)b;
    return x->order < y->order ? -1 : x->order > y->order;
}

static void on_job_file(void *user, const char *dir_name, const char *json, size_t len)
{
    svc_server *s = user;
    svc_job *j = svc_job_from_file(json, len);
    if (!j || strcmp(j->ids, dir_name) != 0) {
        SVC_WARN("store: jobs/%s/job.json is not a finished job; ignored", dir_name);
        svc_job_free(j);
        return;
    }
    if (svc_jobs_find(s->jobs, j->id)) {
        svc_job_free(j);
        return;
    }
    svc_jobs_insert(s->jobs, j);
}

/* Journal: replay, keep the unfinished accepts, compact. */
static int open_journal(svc_server *s)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/journal.log", s->cfg.data_dir);
    replay_state st = {0};
    int rc = svc_journal_local_open(path, on_record, &st, &s->journal);
    if (rc < 0) {
        SVC_ERROR("cannot open the journal %s: %s", path, strerror(-rc));
        return -1;
    }
    if (st.bad)
        SVC_WARN("journal: %zu record(s) not understood; ignored", st.bad);
    if (st.n)
        qsort(st.recs, st.n, sizeof *st.recs, cmp_rec);
    replay_rec **keep = calloc(st.n ? st.n : 1, sizeof *keep);
    size_t nkeep = 0;
    for (size_t i = 0; i < st.n;) {
        size_t k = i;
        replay_rec *accept = NULL;
        bool final = false;
        for (; k < st.n && st.recs[k].id == st.recs[i].id; k++) {
            if (st.recs[k].final)
                final = true;
            else
                accept = &st.recs[k];
        }
        /* a job.json already on disk (written before a crash cut off its
         * final record) wins */
        if (accept && !final && !svc_jobs_find(s->jobs, accept->id) && keep)
            keep[nkeep++] = accept;
        i = k;
    }
    if (nkeep)
        qsort(keep, nkeep, sizeof *keep, cmp_order);
    s->replay = cJSON_CreateArray();
    const char **payloads = calloc(nkeep ? nkeep : 1, sizeof *payloads);
    size_t *lens = calloc(nkeep ? nkeep : 1, sizeof *lens);
    size_t np = 0;
    for (size_t i = 0; i < nkeep; i++) {
        if (!keep[i]->payload)
            continue;
        payloads[np] = keep[i]->payload;
        lens[np] = strlen(keep[i]->payload);
        np++;
        cJSON_AddItemToArray(s->replay, keep[i]->json);
        keep[i]->json = NULL;
    }
    rc = payloads && lens ? s->journal->ops->rewrite(s->journal, payloads, lens, (int)np)
                          : -ENOMEM;
    if (rc < 0)
        SVC_WARN("journal: compaction failed (%s); it keeps growing until the next start",
                 strerror(-rc));
    else if (st.n)
        SVC_INFO("journal: %zu record(s) read, %zu unfinished job(s) kept", st.n, np);
    for (size_t i = 0; i < st.n; i++) {
        free(st.recs[i].payload);
        cJSON_Delete(st.recs[i].json);
    }
    free(st.recs);
    free(keep);
    free(payloads);
    free(lens);
    return 0;
}

/* Replay the journal's unfinished jobs (now that parameters can be checked). */
void svc_server_replay_jobs(svc_server *s)
{
    if (!s->replay)
        return;
    svc_params_ctx ctx;
    svc_server_params_ctx(s, &ctx);
    int n = cJSON_GetArraySize(s->replay), queued = 0;
    svc_job **list = calloc((size_t)(n ? n : 1), sizeof *list);
    const cJSON *rec;
    cJSON_ArrayForEach(rec, s->replay)
    {
        const cJSON *idj = cJSON_GetObjectItemCaseSensitive(rec, "id");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(rec, "request");
        uint64_t id = 0;
        if (!cJSON_IsString(idj) || !svc_id_parse(idj->valuestring, 'j', &id) ||
            svc_jobs_find(s->jobs, id))
            continue;
        svc_params *p = NULL;
        svc_param_error pe;
        if (svc_params_parse(req, NULL, &ctx, &p, &pe) < 0) {
            SVC_WARN("journal: job %s cannot run any more (%s%s%s); dropped", idj->valuestring,
                     pe.field, pe.field[0] ? ": " : "", pe.message);
            char *text = NULL;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "record", "failed");
            cJSON_AddStringToObject(o, "id", idj->valuestring);
            text = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
            journal_one(s, text);
            continue;
        }
        const cJSON *created = cJSON_GetObjectItemCaseSensitive(rec, "created");
        svc_job *j = svc_job_new(id, p, cJSON_IsNumber(created) ? created->valuedouble
                                                                : svc_now_unix());
        if (!j) {
            svc_params_unref(p);
            continue;
        }
        const cJSON *batch = cJSON_GetObjectItemCaseSensitive(rec, "batch");
        const cJSON *bi = cJSON_GetObjectItemCaseSensitive(rec, "batch_index");
        uint64_t bid = 0;
        if (cJSON_IsString(batch) && svc_id_parse(batch->valuestring, 'b', &bid)) {
            j->batch_id = bid;
            j->batch_index = cJSON_IsNumber(bi) ? (int)bi->valuedouble : 0;
        }
        svc_jobs_insert(s->jobs, j);
        if (list)
            list[queued++] = j;
    }
    svc_jobs_rebuild_batches(s->jobs);
    for (int i = 0; i < queued; i++)
        svc_job_enqueue(s, list[i]);
    svc_jobs_update_positions(s);
    free(list);
    if (queued)
        SVC_INFO("journal: %d unfinished job%s queued again", queued, queued == 1 ? "" : "s");
    cJSON_Delete(s->replay);
    s->replay = NULL;
}

int svc_server_load_state(svc_server *s)
{
    svc_store_scan(s->cfg.data_dir, on_job_file, s);
    return open_journal(s);
}
