/*
 * pipeline/embeddings.c - textual-inversion embeddings in the engine.
 *
 * Why a folder read whole, and read again when it changes: A1111 applies
 * an embedding wherever its name appears in a prompt, so the engine must
 * know every name before it tokenizes anything; the files are a few KB.
 * A1111 reloads its folder when the folder's mtime moves
 * (load_textual_inversion_embeddings); Tessera does the same, checked with
 * one stat() in each image's prepare phase, so a file added, removed or
 * renamed into place is seen by the next image without a restart, and
 * refresh-embeddings has nothing left to do.  A file of the wrong shape is
 * skipped (listed with its reason), as A1111 skips it, rather than failing
 * the prompts that happen to contain its name.
 */
#include "pipeline/embeddings.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/log.h"
#include "model/embeddings.h"
#include "pipeline/pipeline_internal.h"

struct tsr_engine_emb {
    char *dir;               /* NULL = none */
    int dims[2], n_dims;     /* the text encoders' widths */
    tsr_embedding_db *db;    /* the loaded table */
    struct timespec mtime;   /* the folder's when db was read */
    char hashes[512];        /* the last image's TI hashes (tsr_batch_image.ti_hashes' size) */
};

static int reload(tsr_engine *e, const struct timespec *mt)
{
    tsr_engine_emb *m = e->emb;
    tsr_embedding_db *db = NULL;
    TSR_TRY(tsr_embedding_db_load(m->dir, m->dims, m->n_dims, &db));
    for (int i = 0; i < db->n_skip; i++)
        TSR_WARN("embedding '%s' skipped: %s", db->skip[i].name, db->skip[i].reason);
    const int rc = tsr_text_cond_set_embeddings(e->cond, db);
    if (rc < 0) { /* back to the table that was in use */
        tsr_embedding_db_free(db);
        if (m->db && tsr_text_cond_set_embeddings(e->cond, m->db) < 0)
            TSR_WARN("embeddings dropped: %s", tsr_last_error());
        return rc;
    }
    tsr_embedding_db_free(m->db);
    m->db = db;
    m->mtime = *mt;
    return TSR_OK;
}

int tsr_engine_emb_open(tsr_engine *e, const tsr_engine_options *o)
{
    tsr_engine_emb *m = calloc(1, sizeof *m);
    if (!m)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    e->emb = m;
    m->n_dims = tsr_text_cond_encoder_dims(e->cond, m->dims);
    if (!o->embeddings_dir || !*o->embeddings_dir)
        return TSR_OK;
    struct stat sb;
    if (stat(o->embeddings_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return tsr_errorf(TSR_ERR_NOT_FOUND, "embeddings folder '%s' is not a folder",
                          o->embeddings_dir);
    if (!(m->dir = strdup(o->embeddings_dir)))
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    return reload(e, &sb.st_mtim);
}

void tsr_engine_emb_close(tsr_engine *e)
{
    if (!e->emb)
        return;
    if (e->cond)
        tsr_text_cond_set_embeddings(e->cond, NULL);
    tsr_embedding_db_free(e->emb->db);
    free(e->emb->dir);
    free(e->emb);
    e->emb = NULL;
}

int tsr_engine_emb_refresh(tsr_engine *e)
{
    tsr_engine_emb *m = e->emb;
    if (!m || !m->dir)
        return TSR_OK;
    struct stat sb;
    if (stat(m->dir, &sb) != 0)
        return TSR_OK; /* gone for now: keep what was loaded */
    if (sb.st_mtim.tv_sec == m->mtime.tv_sec && sb.st_mtim.tv_nsec == m->mtime.tv_nsec)
        return TSR_OK;
    /* an unreadable folder keeps what was loaded: the image goes on, the
     * operator reads why in the log (never the client: it names a path) */
    if (reload(e, &sb.st_mtim) < 0) {
        TSR_WARN("embeddings folder not reloaded: %s", tsr_last_error());
        tsr_error_clear();
    }
    return TSR_OK;
}

void tsr_engine_emb_begin(tsr_engine *e)
{
    tsr_text_cond_reset_used(e->cond);
}

const char *tsr_engine_emb_hashes(tsr_engine *e)
{
    if (!e->emb)
        return "";
    if (tsr_text_cond_used_hashes(e->cond, e->emb->hashes, sizeof e->emb->hashes) < 0) {
        tsr_error_clear();
        e->emb->hashes[0] = '\0';
    }
    return e->emb->hashes;
}

void tsr_embedding_info_free(tsr_embedding_info *a, int n)
{
    for (int i = 0; a && i < n; i++) {
        free(a[i].name);
        free(a[i].error);
    }
    free(a);
}

static int cmp_info(const void *a, const void *b)
{
    return strcmp(((const tsr_embedding_info *)a)->name, ((const tsr_embedding_info *)b)->name);
}

int tsr_engine_embeddings(const tsr_engine *e, tsr_embedding_info **out, int *n)
{
    *out = NULL;
    *n = 0;
    if (!e || !e->emb || !e->emb->dir)
        return TSR_OK;
    tsr_embedding_db *db = NULL;
    TSR_TRY(tsr_embedding_db_load(e->emb->dir, e->emb->dims, e->emb->n_dims, &db));
    const int total = db->n + db->n_skip;
    tsr_embedding_info *a = calloc(total ? (size_t)total : 1, sizeof *a);
    int rc = a ? TSR_OK : tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    for (int i = 0; rc >= 0 && i < db->n; i++) {
        const tsr_ti_embedding *em = &db->emb[i];
        a[i].loaded = 1;
        a[i].vectors = em->n_vectors;
        a[i].shape = em->dim[0] + (em->n_parts > 1 ? em->dim[1] : 0);
        memcpy(a[i].hash, em->hash, sizeof a[i].hash);
        if (!(a[i].name = strdup(em->name)))
            rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; rc >= 0 && i < db->n_skip; i++) {
        tsr_embedding_info *x = &a[db->n + i];
        x->vectors = db->skip[i].vectors;
        x->shape = db->skip[i].shape;
        x->name = strdup(db->skip[i].name);
        x->error = strdup(db->skip[i].reason);
        if (!x->name || !x->error)
            rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    }
    tsr_embedding_db_free(db);
    if (rc < 0) {
        tsr_embedding_info_free(a, total);
        return rc;
    }
    qsort(a, (size_t)total, sizeof *a, cmp_info);
    *out = a;
    *n = total;
    return TSR_OK;
}
