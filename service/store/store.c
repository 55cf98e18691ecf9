/*
 * service/store/store.c - see store.h: the data dir's lock, the start-up scan of
 * finished jobs, and the storage thread with its queue of tasks.
 *
 * Why a final job is one task (TASK_FINAL), not a file task and a journal
 * task: the journal record must depend on whether job.json reached the
 * disk.  Written: the short record {"record", "id", "finished"}.  Not
 * written: the same record with the job.json object spliced in as "job",
 * so a restart rebuilds the job, failed with its reason (the text is
 * spliced, not re-parsed: the loop already made it).  If the journal
 * cannot be written either, the accept record stays the job's last word
 * and the job reruns at the next start; both failures are logged.
 */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "images.h"
#include "util.h"

typedef enum task_type {
    TASK_JOURNAL,
    TASK_IMAGE,
    TASK_FINAL,
    TASK_TILES,
    TASK_REMOVE,
    TASK_BARRIER,
    TASK_STOP
} task_type;

typedef struct task {
    task_type type;
    /* JOURNAL */
    char **payloads;
    size_t *lens;
    int n;
    void *cookie;
    /* IMAGE / FINAL (FINAL: the record in payloads[0]) */
    uint64_t job;
    int index;
    uint8_t *rgb;
    int width, height;
    char *text; /* infotext (IMAGE) or job.json (FINAL) */
    uint8_t *blob; /* TILES: the .tiles file */
    size_t blob_len;
    struct task *next;
} task;

struct svc_store {
    char dir[PATH_MAX];
    svc_journal *journal;
    svc_mailbox *mb;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    task *head, *tail; /* guarded by mu */
};

int svc_store_prepare(const char *data_dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/jobs", data_dir) >= (int)sizeof path)
        return -ENAMETOOLONG;
    return svc_mkdirs(path);
}

int svc_store_lock(const char *data_dir, int *fd, long *holder)
{
    char path[PATH_MAX];
    *fd = -1;
    *holder = 0;
    if (snprintf(path, sizeof path, "%s/lock", data_dir) >= (int)sizeof path)
        return -ENAMETOOLONG;
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (f < 0)
        return -errno;
    int rc = 0;
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        char buf[32];
        ssize_t n = rc == -EBUSY ? pread(f, buf, sizeof buf - 1, 0) : -1;
        if (n > 0) {
            buf[n] = '\0';
            *holder = strtol(buf, NULL, 10);
        }
        close(f);
        return rc;
    }
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(f, 0) != 0 || pwrite(f, buf, (size_t)n, 0) != n)
        SVC_WARN("%s: cannot write the pid into it: %s", path, strerror(errno));
    *fd = f;
    return rc;
}

void svc_store_image_path(const char *data_dir, const char *job_id, int index, char *buf,
                          size_t size)
{
    snprintf(buf, size, "%s/jobs/%s/%d.png", data_dir, job_id, index);
}

int svc_store_read_image(const char *data_dir, const char *job_id, int index, char **data,
                         size_t *len)
{
    char path[PATH_MAX];
    svc_store_image_path(data_dir, job_id, index, path, sizeof path);
    int rc = svc_read_file(path, data, len, SVC_STORE_IMAGE_MAX);
    if (rc < 0)
        SVC_WARN("image %s: %s", path, strerror(-rc));
    return rc;
}

char *svc_store_image_b64(const char *data_dir, const char *job_id, int index)
{
    char *data = NULL;
    size_t len = 0;
    if (svc_store_read_image(data_dir, job_id, index, &data, &len) < 0)
        return NULL;
    char *b = svc_base64_encode((const uint8_t *)data, len);
    free(data);
    return b;
}

void svc_store_scan(const char *data_dir,
                    void (*fn)(void *user, const char *dir_name, const char *json, size_t len),
                    void *user)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/jobs", data_dir);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char file[PATH_MAX];
        if (snprintf(file, sizeof file, "%s/%s/job.json", path, de->d_name) >= (int)sizeof file)
            continue;
        char *json = NULL;
        size_t len = 0;
        int rc = svc_read_file(file, &json, &len, 64u << 20);
        if (rc == 0)
            fn(user, de->d_name, json, len);
        else if (rc != -ENOENT)
            SVC_WARN("store: cannot read %s: %s", file, strerror(-rc));
        free(json);
    }
    closedir(d);
}

/* A calloc'd task of a type for one image (index -1: the whole job); NULL
 * on out of memory. */
static task *task_new(task_type type, uint64_t job, int index)
{
    task *t = calloc(1, sizeof *t);
    if (t) {
        t->type = type;
        t->job = job;
        t->index = index;
    }
    return t;
}

static void task_free(task *t)
{
    if (!t)
        return;
    if (t->payloads)
        for (int i = 0; i < t->n; i++)
            free(t->payloads[i]);
    free(t->payloads);
    free(t->lens);
    free(t->rgb);
    free(t->text);
    free(t->blob);
    free(t);
}

static void post_done(svc_store *s, void *cookie, int status)
{
    svc_msg *m = svc_msg_new(SVC_MSG_TASK_DONE);
    if (!m) {
        SVC_ERROR("store: out of memory posting a completion");
        return;
    }
    m->cookie = cookie;
    m->status = status;
    svc_mailbox_post(s->mb, m);
}

/* jobs/<id>/ exists (created and its parent fsync'd the first time). */
static int job_dir(svc_store *s, uint64_t job, char *buf, size_t size)
{
    char id[20];
    svc_id_format('j', job, id);
    snprintf(buf, size, "%s/jobs/%s", s->dir, id);
    if (mkdir(buf, 0700) == 0) {
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%s/jobs", s->dir);
        return svc_fsync_dir(parent);
    }
    return errno == EEXIST ? 0 : -errno;
}

static void run_image(svc_store *s, task *t)
{
    char id[20], dir[PATH_MAX], path[PATH_MAX], err[256];
    svc_id_format('j', t->job, id);
    uint8_t *png = NULL;
    size_t len = 0;
    int rc = svc_png_encode(t->rgb, t->width, t->height, t->text, &png, &len, err, sizeof err);
    if (rc == 0) {
        rc = job_dir(s, t->job, dir, sizeof dir);
        if (rc == 0) {
            svc_store_image_path(s->dir, id, t->index, path, sizeof path);
            rc = svc_write_file_atomic(path, png, len);
        }
        if (rc < 0)
            snprintf(err, sizeof err, "cannot write image %d of %s: %s", t->index, id,
                     strerror(-rc));
    }
    svc_msg *m = svc_msg_new(rc == 0 ? SVC_MSG_IMAGE_STORED : SVC_MSG_IMAGE_FAILED);
    if (!m) {
        SVC_ERROR("store: out of memory posting image %d of %s", t->index, id);
        free(png);
        return;
    }
    m->job = t->job;
    m->index = t->index;
    if (rc == 0) {
        char hex[65];
        svc_sha256_hex(png, len, hex);
        memcpy(m->etag, hex, 32);
        m->etag[32] = '\0';
        m->bytes = len;
        m->text = t->text; /* the infotext goes to the loop */
        t->text = NULL;
    } else {
        SVC_ERROR("store: %s", err);
        m->status = TSR_ERR_IO;
        m->text = strdup(err);
    }
    free(png);
    svc_mailbox_post(s->mb, m);
}

static int append_one(svc_store *s, const char *payload)
{
    size_t len = strlen(payload);
    return s->journal->ops->append(s->journal, &payload, &len, 1);
}

static void run_final(svc_store *s, task *t)
{
    char id[20], dir[PATH_MAX], path[PATH_MAX];
    svc_id_format('j', t->job, id);
    int rc = t->text ? job_dir(s, t->job, dir, sizeof dir) : -ENOMEM;
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/job.json", dir);
        rc = svc_write_file_atomic(path, t->text, strlen(t->text));
    }
    const char *record = t->payloads[0];
    char *full = NULL;
    if (rc < 0 && t->text) {
        /* {"record":...,"finished":N} -> {"record":...,"finished":N,"job":{...}} */
        size_t rl = strlen(record), jl = strlen(t->text);
        full = rl >= 2 && record[rl - 1] == '}' ? malloc(rl + jl + 8) : NULL;
        if (full) {
            memcpy(full, record, rl - 1);
            memcpy(full + rl - 1, ",\"job\":", 7);
            memcpy(full + rl + 6, t->text, jl);
            memcpy(full + rl + 6 + jl, "}", 2);
            record = full;
        }
        SVC_ERROR("store: cannot write jobs/%s/job.json: %s; %s", id, strerror(-rc),
                  full ? "its final journal record carries the job instead"
                       : "out of memory for the journal record that would carry it");
    }
    if (s->journal) {
        int jrc = append_one(s, record);
        if (jrc < 0)
            SVC_ERROR("journal: the final record of %s cannot be written (%s); %s", id,
                      strerror(-jrc),
                      rc < 0 ? "its accept record stands, so it reruns at the next start"
                             : "its job.json is on disk, which a restart reads first");
    }
    free(full);
}

static void run_tiles(svc_store *s, task *t)
{
    char dir[PATH_MAX], path[PATH_MAX];
    int rc = job_dir(s, t->job, dir, sizeof dir);
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/%d.tiles", dir, t->index);
        rc = svc_write_file_atomic(path, t->blob, t->blob_len);
    }
    if (rc < 0)
        SVC_ERROR("store: cannot write %s/%d.tiles: %s", dir, t->index, strerror(-rc));
}

/* rm -r jobs/<id> (its files are flat) */
static void run_remove(svc_store *s, task *t)
{
    char id[20], dir[PATH_MAX], path[PATH_MAX];
    svc_id_format('j', t->job, id);
    if (s->journal && s->journal->ops->holds(s->journal, t->job)) {
        /* its final record carries the job (no job.json): end it first, so
         * that a crash past this point cannot bring the job back */
        char rec[64];
        snprintf(rec, sizeof rec, "{\"record\":\"removed\",\"id\":\"%s\"}", id);
        int rc = append_one(s, rec);
        if (rc < 0)
            SVC_WARN("journal: cannot record the removal of %s (%s); it comes back after a "
                     "restart until it is collected again",
                     id, strerror(-rc));
    }
    snprintf(dir, sizeof dir, "%s/jobs/%s", s->dir, id);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
    if (rmdir(dir) < 0)
        SVC_WARN("store: cannot remove %s: %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/jobs", s->dir);
    svc_fsync_dir(path);
}

static void run_journal(svc_store *s, task *t)
{
    int rc = !s->journal ? -EBADF
                         : s->journal->ops->append(s->journal, (const char *const *)t->payloads,
                                                   t->lens, t->n);
    if (rc < 0)
        SVC_ERROR("journal: append of %d record(s) failed: %s", t->n, strerror(-rc));
    if (t->cookie)
        post_done(s, t->cookie, rc);
}

static void *store_main(void *arg)
{
    svc_store *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head)
            pthread_cond_wait(&s->cv, &s->mu);
        task *t = s->head;
        s->head = t->next;
        if (!s->head)
            s->tail = NULL;
        pthread_mutex_unlock(&s->mu);
        bool stop = t->type == TASK_STOP;
        switch (t->type) {
        case TASK_JOURNAL: run_journal(s, t); break;
        case TASK_IMAGE: run_image(s, t); break;
        case TASK_FINAL: run_final(s, t); break;
        case TASK_TILES: run_tiles(s, t); break;
        case TASK_REMOVE: run_remove(s, t); break;
        case TASK_BARRIER: post_done(s, t->cookie, 0); break;
        case TASK_STOP: break;
        }
        task_free(t);
        if (stop)
            break;
    }
    return NULL;
}

svc_store *svc_store_start(const char *data_dir, svc_journal *journal, svc_mailbox *mb)
{
    svc_store *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    snprintf(s->dir, sizeof s->dir, "%s", data_dir);
    s->journal = journal;
    s->mb = mb;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, store_main, s) != 0) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    return s;
}

static void enqueue(svc_store *s, task *t)
{
    pthread_mutex_lock(&s->mu);
    t->next = NULL;
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void svc_store_stop(svc_store *s)
{
    if (!s)
        return;
    task *t = task_new(TASK_STOP, 0, -1);
    if (t) {
        enqueue(s, t);
        pthread_join(s->thread, NULL);
    } else {
        SVC_ERROR("store: out of memory stopping the storage thread; detaching it");
        pthread_detach(s->thread);
        return;
    }
    for (task *x = s->head, *next; x; x = next) {
        next = x->next;
        task_free(x);
    }
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void svc_store_journal(svc_store *s, char **payloads, size_t *lens, int n, void *cookie)
{
    task *t = task_new(TASK_JOURNAL, 0, -1);
    if (!t) {
        for (int i = 0; i < n; i++)
            free(payloads[i]);
        free(payloads);
        free(lens);
        SVC_ERROR("store: out of memory queueing a journal append");
        if (cookie)
            post_done(s, cookie, -ENOMEM);
        return;
    }
    t->payloads = payloads;
    t->lens = lens;
    t->n = n;
    t->cookie = cookie;
    enqueue(s, t);
}

void svc_store_image(svc_store *s, uint64_t job, int index, uint8_t *rgb, int width, int height,
                     char *infotext)
{
    task *t = task_new(TASK_IMAGE, job, index);
    if (!t) {
        free(rgb);
        free(infotext);
        svc_msg *m = svc_msg_new(SVC_MSG_IMAGE_FAILED);
        if (m) {
            m->job = job;
            m->index = index;
            m->status = TSR_ERR_NOMEM;
            m->text = strdup("out of memory queueing the image write");
            svc_mailbox_post(s->mb, m);
        }
        return;
    }
    t->rgb = rgb;
    t->width = width;
    t->height = height;
    t->text = infotext;
    enqueue(s, t);
}

void svc_store_final(svc_store *s, uint64_t job, char *json, char *record)
{
    task *t = task_new(TASK_FINAL, job, -1);
    char **p = malloc(sizeof *p);
    size_t *l = malloc(sizeof *l);
    if (!t || !p || !l || !record) {
        free(t);
        free(p);
        free(l);
        free(json);
        free(record);
        SVC_ERROR("store: out of memory queueing a final job");
        return;
    }
    p[0] = record;
    l[0] = strlen(record);
    t->text = json;
    t->payloads = p;
    t->lens = l;
    t->n = 1;
    enqueue(s, t);
}

void svc_store_tiles(svc_store *s, uint64_t job, int index, uint8_t *data, size_t len)
{
    task *t = task_new(TASK_TILES, job, index);
    if (!t) {
        free(data);
        SVC_ERROR("store: out of memory queueing tiles");
        return;
    }
    t->blob = data;
    t->blob_len = len;
    enqueue(s, t);
}

void svc_store_remove_job(svc_store *s, uint64_t job)
{
    task *t = task_new(TASK_REMOVE, job, -1);
    if (!t)
        return;
    enqueue(s, t);
}

void svc_store_barrier(svc_store *s, void *cookie)
{
    task *t = task_new(TASK_BARRIER, 0, -1);
    if (!t) {
        post_done(s, cookie, -ENOMEM);
        return;
    }
    t->cookie = cookie;
    enqueue(s, t);
}
