/*
 * service/store/recovery.c - what the server keeps on disk across restarts:
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
 * with the work in flight.  While running the journal compacts itself on
 * the storage thread (journal.c) using classify() below, which tells it
 * which record each job still needs.
 *
 * A failed write must not turn into a lost job (docs/service-design.md,
 * "Limits: the data dir"): when a final job's job.json cannot be written
 * (ENOSPC after the 202), its final record carries the job.json object as
 * "job" (store.c).  Such a record is live: replay rebuilds the job from it
 * (failed, with its error, parameters and timings, as job.json would
 * have), compaction keeps it, and it ends only with the job's "removed"
 * record, journaled when garbage collection deletes the job.  A job.json
 * found on disk still wins over any record.  Split from server.c, which
 * keeps start-up and the loop (accept.c, dispatch.c and drain.c the rest).
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
    if (!text)
        SVC_ERROR("job %s: out of memory writing job.json", j->ids);
    svc_store_final(s->store, j->id, text, record_text(svc_state_name(j->state), j));
}

/* For the journal's own compaction (any thread): an accept is the job's
 * live record; a final record ends it, unless it carries the job (then it
 * is the live record); "removed" ends it. */
static svc_journal_class classify(const char *payload, size_t len, uint64_t *key)
{
    /* fast path: accept records (the long ones, init images included) start
     * with these members, as svc_job_accept_record prints them */
    static const char acc[] = "{\"record\":\"accept\",\"id\":\"";
    const size_t al = sizeof acc - 1;
    *key = 0;
    if (len > al + 19 && memcmp(payload, acc, al) == 0 && payload[al + 18] == '"') {
        char ids[19];
        memcpy(ids, payload + al, 18);
        ids[18] = '\0';
        if (svc_id_parse(ids, 'j', key))
            return SVC_JOURNAL_LIVE;
    }
    char err[128];
    cJSON *o = svc_json_parse(payload, len, err, sizeof err);
    const cJSON *kind = o ? cJSON_GetObjectItemCaseSensitive(o, "record") : NULL;
    const cJSON *idj = o ? cJSON_GetObjectItemCaseSensitive(o, "id") : NULL;
    svc_journal_class c = SVC_JOURNAL_DEAD;
    if (cJSON_IsString(kind) && cJSON_IsString(idj) &&
        svc_id_parse(idj->valuestring, 'j', key)) {
        if (strcmp(kind->valuestring, "accept") == 0)
            c = SVC_JOURNAL_LIVE;
        else if (strcmp(kind->valuestring, "removed") == 0)
            c = SVC_JOURNAL_END;
        else
            c = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(o, "job")) ? SVC_JOURNAL_LIVE
                                                                           : SVC_JOURNAL_END;
    }
    cJSON_Delete(o);
    return c;
}

typedef struct replay_rec {
    uint64_t id;
    size_t order;
    bool final;
    bool removed;  /* garbage-collected: nothing of the job is kept */
    bool carries;  /* a final record with the job in it ("job") */
    char *payload; /* accept records and carrying ones: the text as journaled */
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
    r->removed = strcmp(kind->valuestring, "removed") == 0;
    r->carries = r->final && !r->removed &&
                 cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(o, "job"));
    if (!r->final || r->carries) {
        r->payload = malloc(len + 1);
        if (!r->payload) {
            cJSON_Delete(o);
            return 1;
        }
        memcpy(r->payload, payload, len);
        r->payload[len] = '\0';
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

/* A final job whose job.json never reached the disk, from the record that
 * carries it; false when it cannot be read. */
static bool rebuild_carried(svc_server *s, const replay_rec *r)
{
    /* the job.json text as store.c spliced it in (numbers as written, not
     * printed again), else the parsed object printed again */
    static const char splice[] = ",\"job\":";
    const char *at = strstr(r->payload, splice);
    size_t plen = strlen(r->payload);
    svc_job *j = NULL;
    if (at && plen > 0 && r->payload[plen - 1] == '}') {
        const char *text = at + sizeof splice - 1;
        j = svc_job_from_file(text, (size_t)(r->payload + plen - 1 - text));
    }
    if (!j) {
        const cJSON *job = cJSON_GetObjectItemCaseSensitive(r->json, "job");
        char *text = job ? cJSON_PrintUnformatted(job) : NULL;
        j = text ? svc_job_from_file(text, strlen(text)) : NULL;
        cJSON_free(text);
    }
    if (!j || j->id != r->id) {
        svc_job_free(j);
        return false;
    }
    svc_jobs_insert(s->jobs, j);
    SVC_INFO("journal: job %s is %s (from its final record: its job.json was never written)",
             j->ids, svc_state_name(j->state));
    return true;
}

/* Journal: replay, keep the unfinished accepts and the records that carry
 * a job, compact. */
static int open_journal(svc_server *s)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/journal.log", s->cfg.data_dir);
    replay_state st = {0};
    svc_journal_options opt = {on_record, &st, classify,
                               (size_t)(s->cfg.journal_compact_kb > 0 ? s->cfg.journal_compact_kb
                                                                      : 0) * 1024};
    int rc = svc_journal_local_open(path, &opt, &s->journal);
    if (rc < 0) {
        SVC_ERROR("cannot open the journal %s: %s", path, strerror(-rc));
        for (size_t i = 0; i < st.n; i++) {
            free(st.recs[i].payload);
            cJSON_Delete(st.recs[i].json);
        }
        free(st.recs);
        return -1;
    }
    if (st.bad)
        SVC_WARN("journal: %zu record(s) not understood; ignored", st.bad);
    if (st.n)
        qsort(st.recs, st.n, sizeof *st.recs, cmp_rec);
    replay_rec **keep = calloc(st.n ? st.n : 1, sizeof *keep);
    size_t nkeep = 0, carried = 0;
    for (size_t i = 0; i < st.n && keep;) {
        size_t k = i;
        replay_rec *accept = NULL, *carry = NULL;
        bool final = false, removed = false;
        for (; k < st.n && st.recs[k].id == st.recs[i].id; k++) {
            replay_rec *r = &st.recs[k];
            if (r->removed)
                removed = true;
            else if (r->carries)
                carry = r;
            else if (r->final)
                final = true;
            else
                accept = r;
        }
        /* a job.json already on disk (written before a crash cut off its
         * final record) wins */
        const bool on_disk = svc_jobs_find(s->jobs, st.recs[i].id) != NULL;
        if (removed || on_disk) {
            /* nothing to keep */
        } else if (carry) {
            if (!rebuild_carried(s, carry)) {
                char ids[20];
                svc_id_format('j', carry->id, ids);
                SVC_WARN("journal: the final record of job %s cannot be read back; kept as it "
                         "is",
                         ids);
            }
            keep[nkeep++] = carry;
            carried++;
        } else if (accept && !final) {
            keep[nkeep++] = accept;
        }
        i = k;
    }
    if (nkeep)
        qsort(keep, nkeep, sizeof *keep, cmp_order);
    s->replay = cJSON_CreateArray();
    const char **payloads = calloc(nkeep ? nkeep : 1, sizeof *payloads);
    size_t *lens = calloc(nkeep ? nkeep : 1, sizeof *lens);
    size_t np = 0;
    for (size_t i = 0; payloads && lens && i < nkeep; i++) {
        payloads[np] = keep[i]->payload;
        lens[np] = strlen(keep[i]->payload);
        np++;
        if (!keep[i]->carries) {
            cJSON_AddItemToArray(s->replay, keep[i]->json);
            keep[i]->json = NULL;
        }
    }
    rc = keep && payloads && lens ? s->journal->ops->rewrite(s->journal, payloads, lens, (int)np)
                                  : -ENOMEM;
    if (rc < 0)
        SVC_WARN("journal: compaction failed (%s); it keeps growing until the next start",
                 strerror(-rc));
    else if (st.n)
        SVC_INFO("journal: %zu record(s) read, %zu unfinished job(s) kept%s", st.n,
                 np - carried, carried ? " (and final records that carry their job)" : "");
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
        const cJSON *owner = cJSON_GetObjectItemCaseSensitive(rec, "owner");
        svc_job_set_owner(j, cJSON_IsString(owner) ? owner->valuestring : NULL);
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

/* What the data dir keeps, once at start (docs/service-design.md, "Limits:
 * the data dir"), so an operator sees the bounds without reading --help. */
static void log_limits(const svc_server *s)
{
    char keep[96], hours[64], compact[64];
    if (s->cfg.keep_jobs > 0)
        snprintf(keep, sizeof keep, "the newest %d finished jobs (--keep-jobs)", s->cfg.keep_jobs);
    else
        snprintf(keep, sizeof keep, "every finished job (--keep-jobs 0)");
    if (s->cfg.keep_hours > 0)
        snprintf(hours, sizeof hours, ", for %g hours (--keep-hours)", s->cfg.keep_hours);
    else
        hours[0] = '\0';
    if (s->cfg.journal_compact_kb > 0)
        snprintf(compact, sizeof compact, "past %d KiB of finished records",
                 s->cfg.journal_compact_kb);
    else
        snprintf(compact, sizeof compact, "at start-up only");
    SVC_INFO("data dir %s: keeps %s%s; finished jobs' tiles in RAM up to %d MiB "
             "(--tile-cache-mb); journal compacted %s (--journal-compact-kb)",
             s->cfg.data_dir, keep, hours, s->cfg.tile_cache_mb > 0 ? s->cfg.tile_cache_mb : 0,
             compact);
}

int svc_server_load_state(svc_server *s)
{
    log_limits(s);
    svc_store_scan(s->cfg.data_dir, on_job_file, s);
    return open_journal(s);
}
