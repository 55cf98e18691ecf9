/*
 * text/conditioner.c - see conditioner.h.  The family rules live in one
 * place (cond_output); everything else is the same for every family.
 */
#include "text/conditioner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/embeddings.h"
#include "model/lora.h"
#include "text/clip.h"
#include "text/prompt.h"
#include "text/tokenizer.h"

#define COND_MAX_ENCODERS 2
#define COND_CACHE 4
#define COND_MAX_CHUNKS 64 /* 64 windows = 4,800 tokens of prompt */
#define WINDOW TSR_CLIP_MAX_LENGTH

typedef struct cond_encoder {
    tsr_tokenizer *tok;
    tsr_weights *weights;  /* owned, or borrowed when `shared` */
    bool shared;           /* weights borrowed (tsr_text_cond_open_shared) */
    tsr_clip *clip;
    int dim;
} cond_encoder;

typedef struct cond_cache {
    int clip_skip; /* 0 = unused */
    tsr_text_embedding emb;
} cond_cache;

struct tsr_text_cond {
    tsr_backend *backend;
    bool sdxl; /* penultimate states, no final norm, pooled from the last encoder */
    int n_enc;
    cond_encoder enc[COND_MAX_ENCODERS];
    int dim, pooled_dim;
    cond_cache cache[COND_CACHE];
    const tsr_lora_set *lora; /* borrowed: tsr_text_cond_set_lora */
    cond_cache lora_empty;    /* the empty prompt under `lora` (not shared) */
    /* textual inversion (tsr_text_cond_set_embeddings) */
    const tsr_embedding_db *emb;          /* borrowed */
    tsr_prompt_embedding *pe[COND_MAX_ENCODERS]; /* longest name first */
    int *pe_db[COND_MAX_ENCODERS];        /* pe[e][i] is emb->emb[pe_db[e][i]] */
    tsr_ids pe_ids[COND_MAX_ENCODERS];    /* the names' tokens, back to back */
    bool *used;                           /* [emb->n]: seen since the last reset */
};

static void drop_embeddings(tsr_text_cond *c)
{
    for (int e = 0; e < COND_MAX_ENCODERS; e++) {
        free(c->pe[e]);
        free(c->pe_db[e]);
        tsr_ids_free(&c->pe_ids[e]);
        c->pe[e] = NULL;
        c->pe_db[e] = NULL;
    }
    free(c->used);
    c->used = NULL;
    c->emb = NULL;
}

int tsr_text_cond_set_embeddings(tsr_text_cond *c, const tsr_embedding_db *db)
{
    drop_embeddings(c);
    if (!db || db->n == 0)
        return TSR_OK;
    for (int i = 0; i < db->n; i++)
        if (db->emb[i].n_parts != c->n_enc)
            return tsr_errorf(TSR_ERR_INVALID, "embedding '%s' has %d parts for %d encoders",
                              db->emb[i].name, db->emb[i].n_parts, c->n_enc);
    int rc = TSR_OK;
    c->used = calloc((size_t)db->n, sizeof *c->used);
    if (!c->used)
        rc = tsr_errorf(TSR_ERR_NOMEM, "text conditioner: out of memory");
    for (int e = 0; rc >= 0 && e < c->n_enc; e++) {
        size_t *start = calloc((size_t)db->n + 1, sizeof *start);
        c->pe[e] = calloc((size_t)db->n, sizeof *c->pe[e]);
        c->pe_db[e] = calloc((size_t)db->n, sizeof *c->pe_db[e]);
        if (!start || !c->pe[e] || !c->pe_db[e]) {
            free(start);
            rc = tsr_errorf(TSR_ERR_NOMEM, "text conditioner: out of memory");
            break;
        }
        /* the names as this encoder's tokenizer reads them (A1111 tokenizes
         * each name with the model's tokenizer) */
        for (int i = 0; rc >= 0 && i < db->n; i++) {
            start[i] = c->pe_ids[e].n;
            const char *nm = db->emb[i].name;
            rc = tsr_tokenizer_encode(c->enc[e].tok, nm, strlen(nm), &c->pe_ids[e]);
        }
        start[db->n] = c->pe_ids[e].n;
        /* longest first; equal lengths keep the table's (name) order */
        int k = 0;
        for (size_t len = c->pe_ids[e].n; rc >= 0 && len > 0; len--)
            for (int i = 0; i < db->n; i++)
                if (start[i + 1] - start[i] == len) {
                    c->pe[e][k].ids = c->pe_ids[e].v + start[i];
                    c->pe[e][k].n_ids = (int)len;
                    c->pe[e][k].n_vectors = db->emb[i].n_vectors;
                    c->pe_db[e][k++] = i;
                }
        free(start);
    }
    if (rc < 0) {
        drop_embeddings(c);
        return rc;
    }
    c->emb = db;
    return TSR_OK;
}

int tsr_text_cond_encoder_dims(const tsr_text_cond *c, int dims[2])
{
    for (int e = 0; e < c->n_enc; e++)
        dims[e] = c->enc[e].dim;
    return c->n_enc;
}

void tsr_text_cond_reset_used(tsr_text_cond *c)
{
    if (c->used)
        memset(c->used, 0, (size_t)c->emb->n * sizeof *c->used);
}

int tsr_text_cond_used_hashes(const tsr_text_cond *c, char *buf, size_t size)
{
    size_t len = 0;
    if (size)
        buf[0] = '\0';
    for (int i = 0; c->used && i < c->emb->n; i++) {
        if (!c->used[i])
            continue;
        char name[160];
        size_t k = 0;
        for (const char *s = c->emb->emb[i].name; *s && k + 1 < sizeof name; s++)
            if (*s != ':' && *s != ',')
                name[k++] = *s;
        name[k] = '\0';
        int w = snprintf(buf + len, size > len ? size - len : 0, "%s%s: %s", len ? ", " : "",
                         name, c->emb->emb[i].hash);
        if (w < 0 || (size_t)w >= (size > len ? size - len : 0)) {
            if (size > len)
                buf[len] = '\0'; /* whole entries only: the ones that fit */
            return TSR_OK;
        }
        len += (size_t)w;
    }
    return TSR_OK;
}

/* Whether the set changes what the encoders compute. */
static bool lora_on_te(const tsr_lora_set *s)
{
    for (int i = 0; s && i < s->n; i++)
        if (s->use[i].te_scale != 0.0f &&
            (tsr_lora_module_count(s->use[i].lora, TSR_COMP_TEXT_ENCODER) > 0 ||
             tsr_lora_module_count(s->use[i].lora, TSR_COMP_TEXT_ENCODER_2) > 0))
            return true;
    return false;
}

void tsr_text_cond_set_lora(tsr_text_cond *c, const tsr_lora_set *set)
{
    c->lora = lora_on_te(set) ? set : NULL;
    tsr_text_embedding_free(&c->lora_empty.emb);
    c->lora_empty.clip_skip = 0;
    for (int i = 0; i < c->n_enc; i++)
        tsr_clip_set_lora(c->enc[i].clip, c->lora,
                          i == 0 ? TSR_COMP_TEXT_ENCODER : TSR_COMP_TEXT_ENCODER_2);
}

const tsr_weights *tsr_text_cond_weights(const tsr_text_cond *c, int which)
{
    return which >= 0 && which < c->n_enc ? c->enc[which].weights : NULL;
}

void tsr_text_embedding_free(tsr_text_embedding *e)
{
    if (!e)
        return;
    free(e->context);
    free(e->pooled);
    memset(e, 0, sizeof *e);
}

int tsr_text_embedding_copy(tsr_text_embedding *dst, const tsr_text_embedding *src)
{
    memset(dst, 0, sizeof *dst);
    const size_t nc = (size_t)src->n_tokens * src->dim, np = (size_t)src->pooled_dim;
    dst->context = malloc(nc * sizeof(float));
    dst->pooled = np ? malloc(np * sizeof(float)) : NULL;
    if (!dst->context || (np && !dst->pooled)) {
        tsr_text_embedding_free(dst);
        return tsr_errorf(TSR_ERR_NOMEM, "text conditioner: out of memory");
    }
    memcpy(dst->context, src->context, nc * sizeof(float));
    if (np)
        memcpy(dst->pooled, src->pooled, np * sizeof(float));
    dst->n_tokens = src->n_tokens;
    dst->dim = src->dim;
    dst->pooled_dim = src->pooled_dim;
    return TSR_OK;
}

void tsr_text_cond_free(tsr_text_cond *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_enc; i++) {
        tsr_clip_free(c->enc[i].clip);
        if (!c->enc[i].shared)
            tsr_weights_free(c->enc[i].weights);
        tsr_tokenizer_free(c->enc[i].tok);
    }
    for (int i = 0; i < COND_CACHE; i++)
        tsr_text_embedding_free(&c->cache[i].emb);
    tsr_text_embedding_free(&c->lora_empty.emb);
    drop_embeddings(c);
    free(c);
}

void tsr_text_cond_set_tokenizer(tsr_text_cond *c, tsr_tokenizer_mode mode)
{
    for (int i = 0; i < c->n_enc; i++)
        tsr_tokenizer_set_mode(c->enc[i].tok, mode);
    for (int i = 0; i < COND_CACHE; i++) {
        tsr_text_embedding_free(&c->cache[i].emb);
        c->cache[i].clip_skip = 0;
    }
}

int tsr_text_cond_dim(const tsr_text_cond *c)
{
    return c->dim;
}

int tsr_text_cond_pooled_dim(const tsr_text_cond *c)
{
    return c->pooled_dim;
}

/* Encoder `which` (0 = text_encoder, 1 = text_encoder_2) of the model;
 * `share` non-NULL: borrow those weights instead of loading them; `given`
 * non-NULL: take them (owned from here on, failure included). */
static int open_encoder(const tsr_model *m, int which, tsr_backend *be, tsr_weights *share,
                        tsr_weights *given, cond_encoder *e)
{
    if (given)
        e->weights = given; /* owned now: freed with the conditioner */
    const tsr_component comp = which ? TSR_COMP_TEXT_ENCODER_2 : TSR_COMP_TEXT_ENCODER;
    const tsr_textenc_desc *desc = tsr_model_textenc_desc(m, which);
    if (!desc)
        return tsr_errorf(TSR_ERR_NOT_FOUND, "%s: no %s config", tsr_model_path(m),
                          tsr_component_name(comp));
    const char *dir = tsr_model_tokenizer_dir(m, which);
    if (dir) {
        TSR_TRY(tsr_tokenizer_load(dir, &e->tok));
    } else {
        /* Single files carry no tokenizer: OpenAI CLIP pads with EOS, the
         * OpenCLIP towers (SD 2.x, SDXL's second encoder) with "!". */
        bool openclip = which == 1 || tsr_model_family(m) == TSR_FAMILY_SD2;
        TSR_TRY(openclip ? tsr_tokenizer_load_default_pad("!", &e->tok)
                         : tsr_tokenizer_load_default(&e->tok));
    }
    if (tsr_tokenizer_vocab_size(e->tok) > desc->vocab_size)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: the tokenizer has %d tokens but %s only %d",
                          tsr_model_path(m), tsr_tokenizer_vocab_size(e->tok),
                          tsr_component_name(comp), desc->vocab_size);
    if (given) {
        /* taken above */
    } else if (share) {
        e->weights = share;
        e->shared = true;
    } else {
        TSR_TRY(tsr_weights_load(m, comp, be, &e->weights));
    }
    TSR_TRY(tsr_clip_create(desc, e->weights, be, &e->clip));
    e->dim = desc->hidden_size;
    return TSR_OK;
}

static void drop_given(tsr_weights **given)
{
    for (int k = 0; given && k < 2; k++) {
        tsr_weights_free(given[k]);
        given[k] = NULL;
    }
}

static int cond_open(const tsr_model *m, tsr_backend *be, const tsr_text_cond *src,
                     tsr_weights **given, tsr_text_cond **out)
{
    *out = NULL;
    tsr_text_cond *c = calloc(1, sizeof *c);
    if (!c) {
        drop_given(given);
        return tsr_errorf(TSR_ERR_NOMEM, "cannot allocate the text conditioner");
    }
    c->backend = be;
    c->sdxl = tsr_model_family(m) == TSR_FAMILY_SDXL;
    int rc = TSR_OK;
    int want = tsr_model_has(m, TSR_COMP_TEXT_ENCODER) + tsr_model_has(m, TSR_COMP_TEXT_ENCODER_2);
    if (src && src->n_enc != want) {
        rc = tsr_errorf(TSR_ERR_INVALID, "%s: the shared conditioner has %d text encoders, the "
                        "model %d", tsr_model_path(m), src->n_enc, want);
        goto fail;
    }
    if (given && (!given[0] || (want > 1) != (given[1] != NULL))) {
        rc = tsr_errorf(TSR_ERR_INVALID, "%s: weights given for %d text encoders, the model has %d",
                        tsr_model_path(m), given[0] ? (given[1] ? 2 : 1) : 0, want);
        goto fail;
    }
    for (int which = 0; which < 2; which++) {
        if (!tsr_model_has(m, which ? TSR_COMP_TEXT_ENCODER_2 : TSR_COMP_TEXT_ENCODER))
            continue;
        const int k = c->n_enc++;
        tsr_weights *mine = given ? given[k] : NULL;
        if (given)
            given[k] = NULL; /* the encoder's now */
        TSR_CHECK_GOTO(rc, open_encoder(m, which, be, src ? src->enc[k].weights : NULL, mine,
                                        &c->enc[k]), fail);
    }
    if (c->n_enc == 0) {
        rc = tsr_errorf(TSR_ERR_NOT_FOUND, "%s: the model has no text encoder", tsr_model_path(m));
        goto fail;
    }
    if (!c->sdxl && c->n_enc != 1) {
        rc = tsr_errorf(TSR_ERR_FORMAT, "%s: two text encoders outside SDXL", tsr_model_path(m));
        goto fail;
    }
    for (int i = 0; i < c->n_enc; i++)
        c->dim += c->enc[i].dim;
    if (c->sdxl) {
        c->pooled_dim = tsr_clip_get_config(c->enc[c->n_enc - 1].clip)->projection_dim;
        if (c->pooled_dim == 0) {
            rc = tsr_errorf(TSR_ERR_FORMAT, "%s: SDXL's last text encoder has no text_projection",
                            tsr_model_path(m));
            goto fail;
        }
    }
    *out = c;
    return TSR_OK;
fail:
    drop_given(given);
    tsr_text_cond_free(c);
    return rc;
}

int tsr_text_cond_open(const tsr_model *m, tsr_backend *be, tsr_text_cond **out)
{
    return cond_open(m, be, NULL, NULL, out);
}

int tsr_text_cond_open_shared(const tsr_model *m, tsr_backend *be, const tsr_text_cond *src,
                              tsr_text_cond **out)
{
    return cond_open(m, be, src, NULL, out);
}

int tsr_text_cond_open_given(const tsr_model *m, tsr_backend *be, tsr_weights *weights[2],
                             tsr_text_cond **out)
{
    return cond_open(m, be, NULL, weights, out);
}

int tsr_text_cond_max_clip_skip(const tsr_text_cond *c)
{
    /* hidden state `skip` from the end exists for skip <= layers + 1; SDXL
     * reads one further back than the clip skip says */
    int best = 12;
    for (int i = 0; i < c->n_enc; i++) {
        int m = tsr_clip_get_config(c->enc[i].clip)->num_hidden_layers + 1 - (c->sdxl ? 1 : 0);
        if (m < best)
            best = m;
    }
    return best;
}

static tsr_clip_output cond_output(const tsr_text_cond *c, int clip_skip)
{
    tsr_clip_output o;
    o.skip = c->sdxl ? clip_skip + 1 : clip_skip;
    o.final_norm = !c->sdxl;
    return o;
}

/* A1111's emphasis on one window: scale each token's state by its weight,
 * then rescale so the window's mean is what it was. */
static void apply_emphasis(float *z, const float *weights, int dim)
{
    bool plain = true;
    for (int t = 0; t < WINDOW; t++)
        plain &= weights[t] == 1.0f;
    if (plain)
        return; /* exactly the unweighted result */
    double before = 0, after = 0;
    for (int t = 0; t < WINDOW; t++)
        for (int d = 0; d < dim; d++) {
            float v = z[(size_t)t * dim + d];
            before += v;
            after += (double)v * weights[t];
        }
    const double ratio = after != 0 ? before / after : 1.0;
    for (int t = 0; t < WINDOW; t++)
        for (int d = 0; d < dim; d++)
            z[(size_t)t * dim + d] = (float)(z[(size_t)t * dim + d] * weights[t] * ratio);
}

typedef struct cond_batch {
    tsr_prompt_tokens *tok; /* [n_enc * n] */
    int32_t *ids;           /* [windows, 77] for one encoder at a time */
    tsr_clip_fix *fix;      /* [windows * 77]: embedding vectors, one encoder at a time */
    float *hidden[COND_MAX_ENCODERS];
    float *projected;
    int windows;
} cond_batch;

static void batch_free(cond_batch *b, int n_tok)
{
    for (int i = 0; i < n_tok; i++)
        tsr_prompt_tokens_free(&b->tok[i]);
    free(b->tok);
    free(b->ids);
    free(b->fix);
    for (int e = 0; e < COND_MAX_ENCODERS; e++)
        free(b->hidden[e]);
    free(b->projected);
}

static int encode_batch(tsr_text_cond *c, const char *const *prompts, int n, int clip_skip,
                        cond_batch *b, tsr_text_embedding *out)
{
    const int E = c->n_enc;
    tsr_prompt_options opt;
    tsr_prompt_options_init(&opt);
    opt.max_chunks = COND_MAX_CHUNKS;

    /* tokenize with every encoder's tokenizer; windows must line up */
    b->tok = calloc((size_t)E * n, sizeof *b->tok);
    if (!b->tok)
        return tsr_errorf(TSR_ERR_NOMEM, "text conditioner: out of memory");
    for (int i = 0; i < n; i++) {
        int chunks = 0;
        for (int e = 0; e < E; e++) {
            tsr_prompt_tokens *t = &b->tok[e * n + i];
            opt.embeddings = c->pe[e];
            opt.n_embeddings = c->emb ? c->emb->n : 0;
            int rc = tsr_prompt_tokenize(c->enc[e].tok, prompts[i], strlen(prompts[i]), &opt, t);
            if (rc < 0)
                return tsr_error_prefix(rc, "prompt %d", i);
            if (t->n_chunks > chunks)
                chunks = t->n_chunks;
        }
        for (int e = 0; e < E; e++)
            TSR_TRY(tsr_prompt_tokens_pad_chunks(&b->tok[e * n + i], c->enc[e].tok, chunks));
        b->windows += chunks;
    }

    const size_t W = (size_t)b->windows;
    b->ids = malloc(W * WINDOW * sizeof *b->ids);
    b->fix = c->emb ? malloc(W * WINDOW * sizeof *b->fix) : NULL;
    if (!b->ids || (c->emb && !b->fix))
        return tsr_errorf(TSR_ERR_NOMEM, "text conditioner: out of memory");
    const tsr_clip_output o = cond_output(c, clip_skip);
    for (int e = 0; e < E; e++) {
        size_t w = 0;
        int n_fix = 0;
        for (int i = 0; i < n; i++) {
            const tsr_prompt_tokens *t = &b->tok[e * n + i];
            memcpy(b->ids + w * WINDOW, t->ids, (size_t)t->n_chunks * WINDOW * sizeof *b->ids);
            for (size_t r = 0; c->emb && r < (size_t)t->n_chunks * WINDOW; r++) {
                const int32_t f = t->fix[r];
                if (f < 0)
                    continue;
                const int di = c->pe_db[e][TSR_PROMPT_FIX_EMB(f)];
                const tsr_ti_embedding *em = &c->emb->emb[di];
                c->used[di] = true;
                b->fix[n_fix].row = (int64_t)(w * WINDOW + r);
                b->fix[n_fix++].vec = em->vec[e] + (size_t)TSR_PROMPT_FIX_VEC(f) * em->dim[e];
            }
            w += (size_t)t->n_chunks;
        }
        tsr_clip_set_fixes(c->enc[e].clip, b->fix, n_fix);
        b->hidden[e] = malloc(W * WINDOW * c->enc[e].dim * sizeof(float));
        const bool want_pool = c->pooled_dim > 0 && e == E - 1;
        if (want_pool)
            b->projected = malloc(W * c->pooled_dim * sizeof(float));
        if (!b->hidden[e] || (want_pool && !b->projected))
            return tsr_errorf(TSR_ERR_NOMEM, "text conditioner: out of memory");
        const int erc = tsr_clip_encode(c->enc[e].clip, b->ids, (int)W, WINDOW, &o, b->hidden[e],
                                        NULL, want_pool ? b->projected : NULL);
        tsr_clip_set_fixes(c->enc[e].clip, NULL, 0);
        TSR_TRY(erc);
    }

    /* assemble: concatenate encoders along channels, emphasis per window */
    size_t w0 = 0;
    for (int i = 0; i < n; i++) {
        const int chunks = b->tok[i].n_chunks;
        tsr_text_embedding *r = &out[i];
        r->n_tokens = chunks * WINDOW;
        r->dim = c->dim;
        r->context = malloc((size_t)r->n_tokens * c->dim * sizeof(float));
        if (!r->context)
            return tsr_errorf(TSR_ERR_NOMEM, "text conditioner: out of memory");
        for (int k = 0; k < chunks; k++) {
            float *z = r->context + (size_t)k * WINDOW * c->dim;
            for (int t = 0; t < WINDOW; t++) {
                int off = 0;
                for (int e = 0; e < E; e++) {
                    const int De = c->enc[e].dim;
                    memcpy(z + (size_t)t * c->dim + off,
                           b->hidden[e] + ((w0 + k) * WINDOW + t) * (size_t)De, De * sizeof(float));
                    off += De;
                }
            }
            /* weights come from the first tokenizer; all see the same text */
            apply_emphasis(z, b->tok[i].weights + (size_t)k * WINDOW, c->dim);
        }
        if (c->pooled_dim) {
            r->pooled_dim = c->pooled_dim;
            r->pooled = malloc((size_t)c->pooled_dim * sizeof(float));
            if (!r->pooled)
                return tsr_errorf(TSR_ERR_NOMEM, "text conditioner: out of memory");
            memcpy(r->pooled, b->projected + w0 * c->pooled_dim, c->pooled_dim * sizeof(float));
        }
        w0 += (size_t)chunks;
    }
    return TSR_OK;
}

int tsr_text_cond_encode(tsr_text_cond *c, const char *const *prompts, int n, int clip_skip,
                         tsr_text_embedding *out)
{
    if (n < 1 || n > 4096)
        return tsr_errorf(TSR_ERR_INVALID, "prompt batch %d outside 1..4096", n);
    if (clip_skip < 1 || clip_skip > 12)
        return tsr_errorf(TSR_ERR_INVALID, "clip skip %d outside 1..12", clip_skip);
    for (int i = 0; i < n; i++)
        if (!prompts[i])
            return tsr_errorf(TSR_ERR_INVALID, "prompt %d is NULL", i);
    memset(out, 0, (size_t)n * sizeof *out);
    cond_batch b;
    memset(&b, 0, sizeof b);
    int rc = encode_batch(c, prompts, n, clip_skip, &b, out);
    batch_free(&b, b.tok ? c->n_enc * n : 0);
    if (rc < 0)
        for (int i = 0; i < n; i++)
            tsr_text_embedding_free(&out[i]);
    return rc;
}

int tsr_text_cond_empty(tsr_text_cond *c, int clip_skip, const tsr_text_embedding **out)
{
    *out = NULL;
    cond_cache *slot = NULL;
    if (c->lora) { /* under a text-encoder LoRA: computed for this image only */
        slot = &c->lora_empty;
        if (slot->clip_skip != clip_skip) {
            tsr_text_embedding_free(&slot->emb);
            slot->clip_skip = 0;
            const char *empty = "";
            TSR_TRY(tsr_text_cond_encode(c, &empty, 1, clip_skip, &slot->emb));
            slot->clip_skip = clip_skip;
        }
        *out = &slot->emb;
        return TSR_OK;
    }
    for (int i = 0; i < COND_CACHE; i++) {
        if (c->cache[i].clip_skip == clip_skip) {
            *out = &c->cache[i].emb;
            return TSR_OK;
        }
        if (!slot && c->cache[i].clip_skip == 0)
            slot = &c->cache[i];
    }
    if (!slot) { /* full: replace the last entry */
        slot = &c->cache[COND_CACHE - 1];
        tsr_text_embedding_free(&slot->emb);
        slot->clip_skip = 0;
    }
    const char *empty = "";
    TSR_TRY(tsr_text_cond_encode(c, &empty, 1, clip_skip, &slot->emb));
    slot->clip_skip = clip_skip;
    *out = &slot->emb;
    return TSR_OK;
}

int tsr_text_cond_pad(tsr_text_cond *c, int clip_skip, tsr_text_embedding *e, int n_tokens)
{
    if (n_tokens % WINDOW || n_tokens < e->n_tokens || n_tokens > COND_MAX_CHUNKS * WINDOW)
        return tsr_errorf(TSR_ERR_INVALID, "cannot pad %d tokens to %d", e->n_tokens, n_tokens);
    if (n_tokens == e->n_tokens)
        return TSR_OK;
    const tsr_text_embedding *empty;
    TSR_TRY(tsr_text_cond_empty(c, clip_skip, &empty));
    float *grown = realloc(e->context, (size_t)n_tokens * e->dim * sizeof(float));
    if (!grown)
        return tsr_errorf(TSR_ERR_NOMEM, "text conditioner: out of memory");
    e->context = grown;
    const size_t window = (size_t)WINDOW * e->dim;
    for (int t = e->n_tokens; t < n_tokens; t += WINDOW)
        memcpy(e->context + (size_t)t * e->dim, empty->context, window * sizeof(float));
    e->n_tokens = n_tokens;
    return TSR_OK;
}
