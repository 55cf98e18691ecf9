/*
 * model/lora.c - reading a LoRA file and binding it to a loaded model.
 *
 * Why it is built this way: the file is opened through the validating
 * safetensors reader (a hostile header fails there), every key is mapped
 * (lora_keys.c) before anything is allocated, and each module's down, up
 * and alpha are checked against the weight they modify, so a file for
 * another model fails naming the first key that does not fit rather than
 * inside an op.  The matrices then go to the backend in its weight dtype,
 * in one allocation per file: down as [r, in] for linears, as OHWI
 * [r, kh, kw, in] for convs (the layout tsr_conv2d takes, permuted from
 * PyTorch's OIHW once here), up as [out, r].  A pointer-keyed hash gives
 * the module of a model weight in O(1), which is all an op site asks.
 */
#include "model/lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/safetensors.h"

typedef struct lora_module {
    tsr_component comp;
    const char *weight_name;  /* borrowed from the component's name table */
    const tsr_tensor *weight; /* the model's weight (borrowed) */
    const tsr_st_entry *down_e, *up_e, *alpha_e; /* in the file, while loading */
    const char *key;          /* a key of the module, for messages (borrowed, loading) */
    tsr_tensor down, up;      /* on the backend */
    int rank;
    int64_t out, in, kh, kw;
    float alpha_r; /* alpha / rank */
} lora_module;

struct tsr_lora {
    tsr_backend *be;
    void *mem;
    size_t bytes;
    lora_module *mods;
    size_t n;
    size_t *slots; /* hash of weight pointers: index + 1, 0 = empty */
    size_t mask;
    int counts[TSR_COMP_COUNT];
    char hash[13];
};

/* Modules are found by the weight's data pointer, so that a view of a
 * weight (a 1x1 conv seen as a linear) finds it too. */
static size_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static const lora_module *find_module(const tsr_lora *l, const tsr_tensor *w)
{
    if (!l || !l->slots)
        return NULL;
    if (!w)
        return NULL;
    for (size_t i = ptr_hash(w->data) & l->mask;; i = (i + 1) & l->mask) {
        const size_t s = l->slots[i];
        if (s == 0)
            return NULL;
        if (l->mods[s - 1].weight->data == w->data)
            return &l->mods[s - 1];
    }
}

void tsr_lora_free(tsr_lora *l)
{
    if (!l)
        return;
    if (l->mem)
        tsr_backend_free(l->be, l->mem);
    free(l->mods);
    free(l->slots);
    free(l);
}

size_t tsr_lora_bytes(const tsr_lora *l) { return l ? l->bytes : 0; }
const char *tsr_lora_hash(const tsr_lora *l) { return l ? l->hash : ""; }
int tsr_lora_module_count(const tsr_lora *l, tsr_component c)
{
    return l && c >= 0 && c < TSR_COMP_COUNT ? l->counts[c] : 0;
}

/* A1111's AutoV3 ("addnet") hash: sha256 of the data after the header. */
static int file_hash(const char *path, char out[13])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tsr_errorf(TSR_ERR_IO, "%s: cannot open", path);
    uint8_t len8[8];
    int rc = TSR_OK;
    if (fread(len8, 1, 8, f) != 8) {
        rc = tsr_errorf(TSR_ERR_FORMAT, "%s: truncated", path);
        goto done;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | len8[i];
    if (hl > TSR_ST_MAX_HEADER || fseek(f, (long)(8 + hl), SEEK_SET) != 0) {
        rc = tsr_errorf(TSR_ERR_FORMAT, "%s: bad header length", path);
        goto done;
    }
    tsr_sha256_ctx ctx;
    tsr_sha256_init(&ctx);
    static _Thread_local unsigned char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        tsr_sha256_update(&ctx, buf, got);
    uint8_t d[32];
    tsr_sha256_final(&ctx, d);
    char hex[65];
    tsr_sha256_hex(d, hex);
    memcpy(out, hex, 12);
    out[12] = '\0';
done:
    fclose(f);
    return rc;
}

/* One float of a 0-D or one-element tensor (alpha). */
static int read_scalar(const tsr_safetensors *st, const tsr_st_entry *e, float *v)
{
    tsr_dtype dt;
    if (tsr_st_numel(e) != 1 || !tsr_st_dtype_to_tsr(e->dtype, &dt) || dt == TSR_I32)
        return tsr_errorf(TSR_ERR_FORMAT, "lora: '%s' must be one F32/F16/BF16 number", e->name);
    tsr_convert_to_f32(v, tsr_st_data(st, e), dt, 1);
    if (!(*v > 0.0f) || *v > 1e6f)
        return tsr_errorf(TSR_ERR_FORMAT, "lora: '%s' = %g is not a positive alpha", e->name,
                          (double)*v);
    return TSR_OK;
}

/* Check a module's down/up against its weight; fill the shape fields. */
static int check_module(const tsr_safetensors *st, lora_module *m)
{
    const tsr_tensor *w = m->weight;
    if (!m->down_e || !m->up_e)
        return tsr_errorf(TSR_ERR_FORMAT, "lora: '%s' has no %s matrix", m->key,
                          m->down_e ? "up (lora_up / lora_B)" : "down (lora_down / lora_A)");
    if (w->ndim == 2) {
        m->out = w->ne[0], m->in = w->ne[1], m->kh = m->kw = 1;
    } else if (w->ndim == 4) { /* OHWI */
        m->out = w->ne[0], m->kh = w->ne[1], m->kw = w->ne[2], m->in = w->ne[3];
    } else {
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "lora: '%s' targets '%s', not a linear or conv "
                          "weight", m->key, m->weight_name);
    }
    const tsr_st_entry *d = m->down_e, *u = m->up_e;
    tsr_dtype dt;
    if (!tsr_st_dtype_to_tsr(d->dtype, &dt) || dt == TSR_I32 || !tsr_st_dtype_to_tsr(u->dtype, &dt) ||
        dt == TSR_I32)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "lora: '%s': matrices must be F32, F16 or BF16",
                          m->key);
    int64_t dkh = 1, dkw = 1;
    if (d->ndim == 4)
        dkh = d->shape[2], dkw = d->shape[3];
    else if (d->ndim != 2)
        return tsr_errorf(TSR_ERR_FORMAT, "lora: '%s': down has %d dims (2 or 4)", d->name,
                          d->ndim);
    const int64_t r = d->shape[0];
    if (r < 1 || r > 65536 || d->shape[1] != m->in || dkh != m->kh || dkw != m->kw)
        return tsr_errorf(TSR_ERR_FORMAT,
                          "lora: '%s' is [%lld, %lld, %lld, %lld] (rank, in, kh, kw); '%s' needs "
                          "in %lld and a %lldx%lld kernel",
                          d->name, (long long)r, (long long)d->shape[1], (long long)dkh,
                          (long long)dkw, m->weight_name, (long long)m->in, (long long)m->kh,
                          (long long)m->kw);
    const bool up4 = u->ndim == 4 && u->shape[2] == 1 && u->shape[3] == 1;
    if ((u->ndim != 2 && !up4) || u->shape[0] != m->out || u->shape[1] != r)
        return tsr_errorf(TSR_ERR_FORMAT,
                          "lora: '%s' must be [%lld, %lld] (out, rank) to fit '%s' and its down",
                          u->name, (long long)m->out, (long long)r, m->weight_name);
    m->rank = (int)r;
    float alpha = (float)r;
    if (m->alpha_e)
        TSR_TRY(read_scalar(st, m->alpha_e, &alpha));
    m->alpha_r = alpha / (float)r;
    return TSR_OK;
}

/* Host f32 copy of an entry (OIHW kept), converted later. */
static void entry_f32(const tsr_safetensors *st, const tsr_st_entry *e, float *dst)
{
    tsr_dtype dt;
    tsr_st_dtype_to_tsr(e->dtype, &dt);
    tsr_convert_to_f32(dst, tsr_st_data(st, e), dt, (size_t)tsr_st_numel(e));
}

static int upload(tsr_lora *l, const tsr_safetensors *st)
{
    tsr_backend *be = l->be;
    const tsr_dtype wd = tsr_backend_weight_dtype(be);
    const size_t es = tsr_dtype_size(wd);
    size_t total = 0, largest = 0;
    for (size_t i = 0; i < l->n; i++) {
        const lora_module *m = &l->mods[i];
        const size_t nd = (size_t)m->rank * (size_t)(m->in * m->kh * m->kw);
        const size_t nu = (size_t)m->out * (size_t)m->rank;
        total += ((nd * es + 63) & ~(size_t)63) + ((nu * es + 63) & ~(size_t)63);
        largest = nd > largest ? nd : largest;
        largest = nu > largest ? nu : largest;
    }
    float *f = malloc(largest * sizeof(float)), *g = malloc(largest * sizeof(float));
    void *h = malloc(largest * es);
    l->mem = total ? tsr_backend_alloc(be, total) : NULL;
    int rc = TSR_OK;
    if (!f || !g || !h || (total && !l->mem)) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "lora: out of memory for %zu bytes of matrices", total);
        goto done;
    }
    l->bytes = total;
    char *at = l->mem;
    for (size_t i = 0; i < l->n; i++) {
        lora_module *m = &l->mods[i];
        const int64_t r = m->rank, in = m->in, kh = m->kh, kw = m->kw;
        const size_t nd = (size_t)(r * in * kh * kw), nu = (size_t)(m->out * r);
        entry_f32(st, m->down_e, f);
        if (m->weight->ndim == 4) { /* OIHW -> OHWI */
            for (int64_t o = 0; o < r; o++)
                for (int64_t c = 0; c < in; c++)
                    for (int64_t y = 0; y < kh; y++)
                        for (int64_t x = 0; x < kw; x++)
                            g[((o * kh + y) * kw + x) * in + c] = f[((o * in + c) * kh + y) * kw + x];
            m->down = tsr_tensor_4d(wd, r, kh, kw, in, at);
        } else {
            memcpy(g, f, nd * sizeof(float));
            m->down = tsr_tensor_2d(wd, r, in, at);
        }
        m->down.backend = be;
        tsr_convert_from_f32(h, wd, g, nd);
        TSR_CHECK_GOTO(rc, tsr_backend_upload(be, at, h, nd * es), done);
        TSR_CHECK_GOTO(rc, tsr_backend_sync(be), done);
        at += (nd * es + 63) & ~(size_t)63;
        entry_f32(st, m->up_e, f);
        m->up = tsr_tensor_2d(wd, m->out, r, at);
        m->up.backend = be;
        tsr_convert_from_f32(h, wd, f, nu);
        TSR_CHECK_GOTO(rc, tsr_backend_upload(be, at, h, nu * es), done);
        TSR_CHECK_GOTO(rc, tsr_backend_sync(be), done);
        at += (nu * es + 63) & ~(size_t)63;
    }
done:
    free(f);
    free(g);
    free(h);
    return rc;
}

static int build_hash(tsr_lora *l)
{
    size_t cap = 16;
    while (cap < 2 * l->n)
        cap *= 2;
    l->slots = calloc(cap, sizeof *l->slots);
    if (!l->slots)
        return tsr_errorf(TSR_ERR_NOMEM, "out of memory");
    l->mask = cap - 1;
    for (size_t k = 0; k < l->n; k++) {
        size_t i = ptr_hash(l->mods[k].weight->data) & l->mask;
        while (l->slots[i])
            i = (i + 1) & l->mask;
        l->slots[i] = k + 1;
    }
    return TSR_OK;
}

int tsr_lora_load(const char *path, const tsr_lora_model *mm, tsr_lora **out)
{
    *out = NULL;
    if (!path || !mm || !mm->backend)
        return tsr_errorf(TSR_ERR_INVALID, "lora: NULL path or model");
    tsr_safetensors *st = NULL;
    TSR_TRY(tsr_st_open(path, &st));
    int rc = TSR_OK;
    tsr_lora *l = calloc(1, sizeof *l);
    const size_t nk = tsr_st_count(st);
    if (!l || !(l->mods = calloc(nk ? nk : 1, sizeof *l->mods))) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "out of memory");
        goto fail;
    }
    l->be = mm->backend;
    /* map every key; a module's keys meet by weight name.  Keys that fit
     * nothing are collected, so one message names them (up to a few). */
    char misfits[600] = "";
    size_t n_misfit = 0, mlen = 0;
    for (size_t i = 0; i < nk; i++) {
        const tsr_st_entry *e = tsr_st_entry_at(st, i);
        tsr_lora_key k;
        const tsr_weights *w = NULL;
        const char *wn = NULL, *why = NULL;
        rc = tsr_lora_parse_key(e->name, &k);
        if (rc == TSR_ERR_NOT_FOUND)
            why = "unknown key";
        else if (rc < 0)
            goto fail_named; /* a known adapter kind this engine does not run */
        else if (!(w = mm->weights[k.comp]) || !mm->names[k.comp])
            why = k.comp == TSR_COMP_TEXT_ENCODER_2 ? "for text_encoder_2, which this model lacks"
                                                    : "for a component this model lacks";
        else if (!(wn = tsr_lora_names_find(mm->names[k.comp], &k)))
            why = k.comp == TSR_COMP_UNET ? "no such unet module" : "no such text encoder module";
        rc = TSR_OK;
        if (why) {
            if (n_misfit++ < 4 && mlen + strlen(e->name) + strlen(why) + 8 < sizeof misfits)
                mlen += (size_t)snprintf(misfits + mlen, sizeof misfits - mlen, "%s'%s' (%s)",
                                         mlen ? ", " : "", e->name, why);
            continue;
        }
        lora_module *m = NULL;
        for (size_t j = 0; j < l->n; j++)
            if (l->mods[j].comp == k.comp && strcmp(l->mods[j].weight_name, wn) == 0)
                m = &l->mods[j];
        if (!m) {
            m = &l->mods[l->n++];
            m->comp = k.comp;
            m->weight_name = wn;
            m->key = e->name;
            TSR_CHECK_GOTO(rc, tsr_weights_get(w, wn, &m->weight), fail_named);
        }
        const tsr_st_entry **slot = k.part == TSR_LORA_PART_DOWN ? &m->down_e
                                    : k.part == TSR_LORA_PART_UP ? &m->up_e
                                                                 : &m->alpha_e;
        if (*slot) {
            rc = tsr_errorf(TSR_ERR_FORMAT, "lora: '%s' and '%s' are the same matrix of '%s'",
                            (*slot)->name, e->name, wn);
            goto fail_named;
        }
        *slot = e;
    }
    if (n_misfit) {
        rc = tsr_errorf(TSR_ERR_NOT_FOUND, "lora: %zu key%s fit nothing in this model: %s%s",
                        n_misfit, n_misfit == 1 ? "" : "s", misfits, n_misfit > 4 ? ", ..." : "");
        goto fail_named;
    }
    if (l->n == 0) {
        rc = tsr_errorf(TSR_ERR_FORMAT, "lora: no LoRA modules in the file");
        goto fail_named;
    }
    for (size_t j = 0; j < l->n; j++) {
        TSR_CHECK_GOTO(rc, check_module(st, &l->mods[j]), fail_named);
        l->counts[l->mods[j].comp]++;
    }
    TSR_CHECK_GOTO(rc, upload(l, st), fail_named);
    TSR_CHECK_GOTO(rc, build_hash(l), fail_named);
    TSR_CHECK_GOTO(rc, file_hash(path, l->hash), fail_named);
    for (size_t j = 0; j < l->n; j++) /* entries die with the reader */
        l->mods[j].down_e = l->mods[j].up_e = l->mods[j].alpha_e = NULL, l->mods[j].key = NULL;
    tsr_st_close(st);
    *out = l;
    return TSR_OK;
fail_named:
    /* the file's name, not its path: the message may reach an API client */
    tsr_error_prefix(rc, "%s", strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
fail:
    tsr_lora_free(l);
    tsr_st_close(st);
    return rc;
}

/* ---- application ---- */

void tsr_lora_scratch_free(tsr_lora_scratch *s)
{
    if (s && s->data)
        tsr_backend_free(s->backend, s->data);
    if (s)
        s->data = NULL, s->cap = 0;
}

static int scratch(tsr_lora_scratch *s, tsr_backend *be, size_t bytes, void **out)
{
    if (s->data && (s->backend != be || s->cap < bytes))
        tsr_lora_scratch_free(s);
    if (!s->data) {
        s->backend = be;
        s->data = tsr_backend_alloc(be, bytes);
        if (!s->data)
            return tsr_errorf(TSR_ERR_NOMEM, "lora: out of memory for %zu bytes of scratch", bytes);
        s->cap = bytes;
    }
    *out = s->data;
    return TSR_OK;
}

bool tsr_lora_set_touches(const tsr_lora_set *set, tsr_component c, const tsr_tensor *w)
{
    if (!set)
        return false;
    for (int i = 0; i < set->n; i++) {
        const float sc = c == TSR_COMP_UNET ? set->use[i].unet_scale : set->use[i].te_scale;
        if (sc != 0.0f && find_module(set->use[i].lora, w))
            return true;
    }
    return false;
}

/* y[M, out] += scale * B(A x) with u = A x [M, r] already computed. */
static int finish(tsr_backend *be, const lora_module *m, tsr_tensor *u, float scale, void *dmem,
                  tsr_tensor *y)
{
    const int64_t M = tsr_tensor_numel(u) / m->rank;
    tsr_tensor u2 = tsr_tensor_view2(u, M, m->rank);
    TSR_TRY(tsr_scale(be, &u2, scale * m->alpha_r, &u2));
    tsr_tensor d = tsr_tensor_like(y, 2, (int64_t[]){M, m->out}, dmem);
    TSR_TRY(tsr_linear(be, &u2, &m->up, NULL, &d));
    tsr_tensor y2 = tsr_tensor_view2(y, M, m->out);
    return tsr_binary(be, TSR_BINARY_ADD, &y2, &d, &y2);
}

static int apply(tsr_lora_scratch *s, const tsr_lora_set *set, tsr_component c,
                 const tsr_tensor *w, const tsr_tensor *x, const tsr_conv2d_params *p,
                 tsr_tensor *y)
{
    if (!set || set->n == 0)
        return TSR_OK;
    tsr_backend *be = y->backend;
    const size_t es = tsr_dtype_size(y->dtype);
    for (int i = 0; i < set->n; i++) {
        const float sc = c == TSR_COMP_UNET ? set->use[i].unet_scale : set->use[i].te_scale;
        const lora_module *m = sc != 0.0f ? find_module(set->use[i].lora, w) : NULL;
        if (!m)
            continue;
        const int64_t out = m->out, r = m->rank;
        const int64_t My = tsr_tensor_numel(y) / out; /* output positions */
        const size_t ub = ((size_t)(My * r) * es + 63) & ~(size_t)63;
        void *mem = NULL;
        TSR_TRY(scratch(s, be, ub + (size_t)(My * out) * es, &mem));
        tsr_tensor u;
        if (p) {
            const int64_t ne[4] = {y->ne[0], y->ne[1], y->ne[2], r};
            u = tsr_tensor_like(y, 4, ne, mem);
            TSR_TRY(tsr_conv2d(be, x, &m->down, NULL, p, &u));
        } else {
            if (m->kh != 1 || m->kw != 1)
                return tsr_errorf(TSR_ERR_INTERNAL, "lora: conv module of '%s' at a linear op",
                                  m->weight_name);
            const int64_t Mx = tsr_tensor_numel(x) / m->in;
            tsr_tensor x2 = tsr_tensor_view2(x, Mx, m->in);
            tsr_tensor a2 = tsr_tensor_view2(&m->down, r, m->in);
            u = tsr_tensor_like(y, 2, (int64_t[]){Mx, r}, mem);
            TSR_TRY(tsr_linear(be, &x2, &a2, NULL, &u));
        }
        TSR_TRY(finish(be, m, &u, sc, (char *)mem + ub, y));
    }
    return TSR_OK;
}

int tsr_lora_linear(tsr_lora_scratch *s, const tsr_lora_set *set, tsr_component c,
                    const tsr_tensor *w, const tsr_tensor *x, tsr_tensor *y)
{
    return apply(s, set, c, w, x, NULL, y);
}

int tsr_lora_conv2d(tsr_lora_scratch *s, const tsr_lora_set *set, tsr_component c,
                    const tsr_tensor *w, const tsr_tensor *x, const tsr_conv2d_params *p,
                    tsr_tensor *y)
{
    return apply(s, set, c, w, x, p, y);
}

bool tsr_lora_rows_touch(const tsr_lora_set *const *sets, int n_sets, tsr_component c,
                         const tsr_tensor *w)
{
    for (int i = 0; sets && i < n_sets; i++)
        if (tsr_lora_set_touches(sets[i], c, w))
            return true;
    return false;
}

static int apply_rows(tsr_lora_scratch *s, const tsr_lora_set *const *sets, int n_sets,
                      tsr_component c, const tsr_tensor *w, const tsr_tensor *x,
                      const tsr_conv2d_params *p, tsr_tensor *y)
{
    if (!sets)
        return TSR_OK;
    const int64_t B = y->ne[0] < n_sets ? y->ne[0] : n_sets;
    /* consecutive rows with the same set (an image's uncond and cond rows)
     * go together: the same rows form the same run whether the image is
     * alone or batched, so its arithmetic does not change */
    for (int64_t i = 0, j; i < B; i = j) {
        for (j = i + 1; j < B && sets[j] == sets[i];)
            j++;
        if (!tsr_lora_set_touches(sets[i], c, w))
            continue;
        tsr_tensor xi = tsr_tensor_rows(x, i, j - i), yi = tsr_tensor_rows(y, i, j - i);
        TSR_TRY(apply(s, sets[i], c, w, &xi, p, &yi));
    }
    return TSR_OK;
}

int tsr_lora_linear_rows(tsr_lora_scratch *s, const tsr_lora_set *const *sets, int n_sets,
                         tsr_component c, const tsr_tensor *w, const tsr_tensor *x, tsr_tensor *y)
{
    return apply_rows(s, sets, n_sets, c, w, x, NULL, y);
}

int tsr_lora_conv2d_rows(tsr_lora_scratch *s, const tsr_lora_set *const *sets, int n_sets,
                         tsr_component c, const tsr_tensor *w, const tsr_tensor *x,
                         const tsr_conv2d_params *p, tsr_tensor *y)
{
    return apply_rows(s, sets, n_sets, c, w, x, p, y);
}
