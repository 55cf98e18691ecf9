/*
 * text/tokenizer.c - CLIP BPE: loading (vocabulary, merges, special tokens);
 * text/tokenizer_bpe.c encodes (text cleanup, pre-tokenisation, BPE).
 *
 * Why it is built this way: every BPE symbol (a vocabulary string, or a
 * merge result missing from a damaged vocabulary) is interned once at load
 * and named by an index, so a merge is a hash lookup on a pair of integers
 * and BPE never compares strings.  Symbols keep their vocabulary id (-1 when
 * the vocabulary lacks them, which maps to UNK as transformers does).  The
 * BPE of each pre-token is cached by its bytes, as CLIPTokenizer caches it.
 * The text cleanup mirrors CLIPTokenizer._tokenize step for step (a1111
 * mode) or the `tokenizers` pipeline transformers 5 builds (default mode);
 * the Unicode tables each relies on are measured from the library it copies
 * (text/unicode.h).  The BPE is shared: for one pre-token both modes give
 * the same symbols, except that the default mode maps a character outside
 * the vocabulary to UNK before merging, as `tokenizers` does.
 */
#include "text/tokenizer.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/tokenizer_files.h"
#include "text/tokenizer_int.h"
#include "text/unicode.h"
#include "text/unicode_clip.h"

#define CLIP_N_MERGES (49152 - 256 - 2) /* merges[1 : 49152-256-2+1] */

extern const char tsr_bpe_default_merges[];
extern const size_t tsr_bpe_default_merges_len;

/* ---- bytes_to_unicode ---- */

static uint32_t byte_cp[256];
static int byte_order[256];
static pthread_once_t byte_once = PTHREAD_ONCE_INIT;

static void byte_init(void)
{
    bool printable[256] = {false};
    int n = 0;
    for (int b = 0; b < 256; b++)
        printable[b] = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    for (int b = 0; b < 256; b++)
        if (printable[b]) {
            byte_cp[b] = (uint32_t)b;
            byte_order[n++] = b;
        }
    int extra = 0;
    for (int b = 0; b < 256; b++)
        if (!printable[b]) {
            byte_cp[b] = 256u + (uint32_t)extra++;
            byte_order[n++] = b;
        }
}

/* ---- interning ---- */


static int32_t sym_find(const tsr_tokenizer *t, const char *s, size_t n)
{
    size_t mask = t->index_cap - 1;
    for (size_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int32_t k = t->sym_index[i];
        if (k < 0)
            return -1;
        const sym *y = &t->syms[k];
        if (y->len == n && memcmp(t->strs + y->off, s, n) == 0)
            return k;
    }
}

static int index_grow(tsr_tokenizer *t)
{
    size_t cap = t->index_cap ? t->index_cap * 2 : 1u << 17;
    int32_t *idx = malloc(cap * sizeof(int32_t));
    if (!idx)
        return tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
    memset(idx, 0xFF, cap * sizeof(int32_t));
    for (size_t k = 0; k < t->n_syms; k++) {
        const sym *y = &t->syms[k];
        size_t i = hash_bytes(t->strs + y->off, y->len) & (cap - 1);
        while (idx[i] >= 0)
            i = (i + 1) & (cap - 1);
        idx[i] = (int32_t)k;
    }
    free(t->sym_index);
    t->sym_index = idx;
    t->index_cap = cap;
    return 0;
}

/* Intern `s`; returns the sym index (>= 0) or a negative status. */
static int32_t sym_intern(tsr_tokenizer *t, const char *s, size_t n)
{
    int32_t k = sym_find(t, s, n);
    if (k >= 0)
        return k;
    if (n > UINT32_MAX / 2 || t->n_syms >= INT32_MAX / 2)
        return tsr_errorf(TSR_ERR_RANGE, "tokenizer: too many or too long tokens");
    if ((t->n_syms + 1) * 2 > t->index_cap)
        TSR_TRY(index_grow(t));
    if (t->strs_n + n > t->strs_cap) {
        size_t cap = t->strs_cap ? t->strs_cap : 1u << 20;
        while (cap < t->strs_n + n)
            cap *= 2;
        char *p = realloc(t->strs, cap);
        if (!p)
            return tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
        t->strs = p;
        t->strs_cap = cap;
    }
    if (t->n_syms == t->syms_cap) {
        size_t cap = t->syms_cap ? t->syms_cap * 2 : 65536;
        sym *p = realloc(t->syms, cap * sizeof(sym));
        if (!p)
            return tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
        t->syms = p;
        t->syms_cap = cap;
    }
    memcpy(t->strs + t->strs_n, s, n);
    k = (int32_t)t->n_syms++;
    t->syms[k] = (sym){(uint32_t)t->strs_n, (uint32_t)n, -1};
    t->strs_n += n;
    size_t mask = t->index_cap - 1;
    size_t i = hash_bytes(s, n) & mask;
    while (t->sym_index[i] >= 0)
        i = (i + 1) & mask;
    t->sym_index[i] = k;
    return k;
}

static int32_t vocab_id(const tsr_tokenizer *t, const char *s)
{
    int32_t k = sym_find(t, s, strlen(s));
    return k >= 0 ? t->syms[k].id : -1;
}

/* ---- merges ---- */


static bool py_space_byte_at(const char *s, size_t n, size_t i, size_t *w)
{
    /* str.split() separators inside merges.txt lines (ASCII + the rest). */
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) {
        *w = 1;
        return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x1F);
    }
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    *w = 1;
    if (len == 1 || i + len > n)
        return false; /* invalid UTF-8 (Python would refuse the file): part of a token */
    uint32_t cp = c & (0x7Fu >> len);
    for (size_t k = 1; k < len; k++) {
        unsigned char d = (unsigned char)s[i + k];
        if ((d & 0xC0) != 0x80)
            return false;
        cp = (cp << 6) | (d & 0x3F);
    }
    *w = len;
    return tsr_u_in(tsr_u_py_space, tsr_u_py_space_n, cp);
}

/* Parse merges text (the "#version" line first).  Lines are merge rules
 * "a b"; a line that does not split into exactly two parts can never match
 * a pair and is skipped, as in Python. */
static int load_merges(tsr_tokenizer *t, const char *text, size_t len, const char *what)
{
    /* text.strip() */
    while (len > 0 && strchr(" \t\r\n\v\f", text[len - 1]))
        len--;
    while (len > 0 && strchr(" \t\r\n\v\f", text[0]))
        text++, len--;
    t->merges_cap = 1u << 17;
    t->merges = calloc(t->merges_cap, sizeof(merge_slot));
    if (!t->merges)
        return tsr_errorf(TSR_ERR_NOMEM, "%s: out of memory", what);
    size_t pos = 0;
    long line = 0;
    int32_t rank = 0;
    while (pos < len && rank < CLIP_N_MERGES) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        if (line++ > 0) {
            size_t start[3], stop[3];
            int parts = 0;
            size_t i = pos, w;
            while (i < end && parts < 3) {
                while (i < end && py_space_byte_at(text, end, i, &w))
                    i += w;
                if (i >= end)
                    break;
                start[parts] = i;
                while (i < end && !py_space_byte_at(text, end, i, &w))
                    i += w;
                stop[parts++] = i;
            }
            if (parts == 2) {
                int32_t a = sym_intern(t, text + start[0], stop[0] - start[0]);
                TSR_TRY(a);
                int32_t b = sym_intern(t, text + start[1], stop[1] - start[1]);
                TSR_TRY(b);
                size_t la = stop[0] - start[0], lb = stop[1] - start[1];
                char *cat = malloc(la + lb + 1);
                if (!cat)
                    return tsr_errorf(TSR_ERR_NOMEM, "%s: out of memory", what);
                memcpy(cat, text + start[0], la);
                memcpy(cat + la, text + start[1], lb);
                int32_t r = sym_intern(t, cat, la + lb);
                free(cat);
                TSR_TRY(r);
                uint64_t key = (((uint64_t)a << 32) | (uint32_t)b) + 1;
                merge_slot *s = merge_slot_for(t, key);
                s->key = key; /* a duplicate keeps the later rank, as dict() does */
                s->rank = rank;
                s->result = r;
            }
            rank++;
        }
        pos = end + 1;
    }
    return 0;
}

/* ---- special tokens ---- */

static int set_added(tsr_tokenizer *t, int slot, const char *content, bool lstrip, bool rstrip)
{
    added_token *a = &t->added[slot];
    free(a->content);
    a->content = NULL;
    a->id = -1;
    if (!content)
        return 0;
    a->content = strdup(content);
    if (!a->content)
        return tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
    a->lstrip = lstrip;
    a->rstrip = rstrip;
    return 0;
}

enum { ADD_BOS = TSR_TOK_BOS, ADD_EOS = TSR_TOK_EOS, ADD_UNK = TSR_TOK_UNK, ADD_PAD = TSR_TOK_PAD };
static const char *const special_keys[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};

/* The a1111 mode (transformers 4's slow CLIPTokenizer): each special from
 * tokenizer_config.json, then special_tokens_map.json, the latter winning. */
static int apply_specials_slow(tsr_tokenizer *t, const tsr_tok_files *files)
{
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < 4; k++) {
            const tsr_tok_spec *sv = pass ? &files->map[k] : &files->cfg[k];
            if (!sv->present)
                continue;
            TSR_TRY(set_added(t, k, sv->null ? NULL : sv->tok.content, sv->tok.lstrip,
                              sv->tok.rstrip));
        }
    return 0;
}

/* Add `a` to the default mode's list.  A token whose text is among the
 * first n_fixed (the listed ones) is left as it is; one among the later
 * (specials) takes the new flags. */
static int fast_add(tsr_tokenizer *t, const added_token *a, int n_fixed)
{
    for (int i = 0; i < t->n_fadded; i++)
        if (strcmp(t->fadded[i].content, a->content) == 0) {
            if (i >= n_fixed) {
                t->fadded[i].lstrip = a->lstrip;
                t->fadded[i].rstrip = a->rstrip;
                t->fadded[i].normalized = a->normalized;
            }
            return 0;
        }
    if (t->n_fadded == MAX_FAST_ADDED) {
        t->fast_too_many = true;
        return 0;
    }
    added_token *d = &t->fadded[t->n_fadded];
    *d = *a; /* id: the file's, else -1 */
    d->content = strdup(a->content);
    if (!d->content)
        return tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
    t->n_fadded++;
    return 0;
}

/* The default mode (transformers 5's CLIPTokenizer.from_pretrained), as
 * measured by running it on each layout of these files:
 *  - the listed tokens come first, with their flags, in id order: the
 *    added_tokens_decoder of tokenizer_config.json, else tokenizer.json's
 *    added_tokens;
 *  - each special comes from tokenizer_config.json when it has an
 *    added_tokens_decoder (special_tokens_map.json is then ignored), else
 *    from special_tokens_map.json, else tokenizer_config.json, else
 *    CLIPTokenizer's default;
 *  - a special whose text is listed is left as listed; the others are added
 *    in the order bos, eos, unk, pad, a later one with the same text
 *    replacing the flags of an earlier one.
 * A string is an AddedToken that is not normalised. */
static int apply_specials_fast(tsr_tokenizer *t, const tsr_tok_files *files)
{
    static const char *const dflt[4] = {"<|startoftext|>", "<|endoftext|>", "<|endoftext|>",
                                        "<|endoftext|>"};
    const char *content[4];
    t->fast_too_many = files->too_many;
    for (int i = 0; i < files->n_listed; i++)
        TSR_TRY(fast_add(t, &files->listed[i], 0));
    const int n_fixed = t->n_fadded;
    for (int k = 0; k < 4; k++) {
        const tsr_tok_spec *sv = &files->cfg[k];
        if (!files->has_decoder && files->map[k].present)
            sv = &files->map[k];
        added_token a = {.id = -1};
        if (!sv->present) {
            a.content = (char *)dflt[k];
        } else if (!sv->null) {
            a = sv->tok;
            a.id = -1;
        }
        content[k] = a.content;
        if (a.content)
            TSR_TRY(fast_add(t, &a, n_fixed));
    }
    int32_t *ids[4] = {&t->fbos, &t->feos, &t->funk, &t->fpad};
    for (int k = 0; k < 4; k++)
        *ids[k] = content[k] ? vocab_id(t, content[k]) : -1;
    return 0;
}

static int finish(tsr_tokenizer *t, const char *what)
{
    for (int k = 0; k < 4; k++) {
        added_token *a = &t->added[k];
        if (!a->content)
            continue;
        a->id = vocab_id(t, a->content);
        if (a->id < 0)
            return tsr_errorf(TSR_ERR_FORMAT, "%s: %s \"%s\" is not in the vocabulary", what,
                              special_keys[k], a->content);
    }
    t->bos = t->added[ADD_BOS].id;
    t->eos = t->added[ADD_EOS].id;
    t->unk = t->added[ADD_UNK].id;
    t->pad = t->added[ADD_PAD].id;
    if (t->bos < 0 || t->eos < 0)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: the tokenizer needs BOS and EOS tokens", what);
    for (int i = 0; i < t->n_fadded; i++) {
        /* An added_tokens_decoder entry outside vocab.json keeps its own id,
         * as transformers gives it (a text encoder without that row refuses
         * it at encode time). */
        added_token *a = &t->fadded[i];
        int32_t v = vocab_id(t, a->content);
        if (v >= 0)
            a->id = v;
        else if (a->id < 0)
            return tsr_errorf(TSR_ERR_FORMAT, "%s: added token \"%s\" is not in the vocabulary",
                              what, a->content);
    }
    if (t->fbos < 0 || t->feos < 0)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: the tokenizer needs BOS and EOS tokens", what);
    t->comma = vocab_id(t, ",</w>");
    t->sot_id = vocab_id(t, "<|startoftext|>");
    t->eot_id = vocab_id(t, "<|endoftext|>");
    t->n_added = 4;
    t->id_to_sym = malloc((size_t)t->vocab_size * sizeof(int32_t));
    if (!t->id_to_sym)
        return tsr_errorf(TSR_ERR_NOMEM, "%s: out of memory", what);
    memset(t->id_to_sym, 0xFF, (size_t)t->vocab_size * sizeof(int32_t));
    for (size_t k = 0; k < t->n_syms; k++)
        if (t->syms[k].id >= 0)
            t->id_to_sym[t->syms[k].id] = (int32_t)k;
    t->cache = calloc(CACHE_CAP, sizeof(cache_slot));
    if (!t->cache)
        return tsr_errorf(TSR_ERR_NOMEM, "%s: out of memory", what);
    return 0;
}

static int tokenizer_new(tsr_tokenizer **out)
{
    pthread_once(&byte_once, byte_init);
    tsr_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
    pthread_mutex_init(&t->lock, NULL);
    for (int k = 0; k < 4; k++)
        t->added[k].id = -1;
    t->fbos = t->feos = t->funk = t->fpad = -1;
    t->mode = TSR_TOKENIZER_DEFAULT;
    *out = t;
    int rc = index_grow(t);
    if (rc < 0)
        return rc;
    /* transformers' CLIPTokenizer defaults. */
    TSR_TRY(set_added(t, ADD_BOS, "<|startoftext|>", false, false));
    TSR_TRY(set_added(t, ADD_EOS, "<|endoftext|>", false, false));
    TSR_TRY(set_added(t, ADD_UNK, "<|endoftext|>", false, false));
    TSR_TRY(set_added(t, ADD_PAD, "<|endoftext|>", false, false));
    return 0;
}

/* Intern the 256 byte symbols and their "</w>" forms (ids from the vocab
 * when present: they normally are). */
static int intern_bytes(tsr_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char s[8];
        int n = tsr_utf8_put(byte_cp[b], s);
        int32_t k = sym_intern(t, s, (size_t)n);
        TSR_TRY(k);
        t->byte_sym[b] = k;
        memcpy(s + n, "</w>", 4);
        k = sym_intern(t, s, (size_t)n + 4);
        TSR_TRY(k);
        t->byte_sym_w[b] = k;
    }
    return 0;
}

/* The vocabulary: a JSON object token -> id. */
static int load_vocab(tsr_tokenizer *t, const cJSON *root, const char *what)
{
    const cJSON *item;
    int32_t max_id = -1;
    cJSON_ArrayForEach(item, root)
    {
        if (!cJSON_IsNumber(item) || item->valuedouble < 0 || item->valuedouble >= (1 << 24) ||
            item->valuedouble != (double)(int32_t)item->valuedouble || !item->string)
            return tsr_errorf(TSR_ERR_FORMAT, "%s: token id of \"%.40s\" is not in [0, 2^24)", what,
                              item->string ? item->string : "?");
        int32_t k = sym_intern(t, item->string, strlen(item->string));
        TSR_TRY(k);
        t->syms[k].id = (int32_t)item->valuedouble;
        if (t->syms[k].id > max_id)
            max_id = t->syms[k].id;
    }
    t->vocab_size = max_id + 1;
    if (t->vocab_size == 0)
        return tsr_errorf(TSR_ERR_FORMAT, "%s: empty vocabulary", what);
    return 0;
}

static bool file_exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

int tsr_tokenizer_load(const char *dir, tsr_tokenizer **out)
{
    tsr_tokenizer *t = NULL;
    char path[4096];
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    tsr_tok_files files;
    int rc;
    *out = NULL;
    TSR_CHECK_GOTO(rc, tsr_tok_files_read(dir, &files), fail);
    TSR_CHECK_GOTO(rc, tokenizer_new(&t), fail);

    /* vocab.json + merges.txt, else tokenizer.json (as transformers 5 saves) */
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    const bool split_files = file_exists(path) || !files.tokenizer_json;
    if (split_files) {
        TSR_CHECK_GOTO(rc, tsr_tok_read_file(path, &text, &len), fail);
        root = cJSON_ParseWithLength(text, len);
        if (!cJSON_IsObject(root)) {
            rc = tsr_errorf(TSR_ERR_FORMAT, "%s: not a JSON object", path);
            goto fail;
        }
        TSR_CHECK_GOTO(rc, load_vocab(t, root, path), fail);
        cJSON_Delete(root);
        root = NULL;
        free(text);
        text = NULL;
    } else {
        const cJSON *vocab;
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        TSR_CHECK_GOTO(rc, tsr_tok_files_vocab(&files, dir, &vocab), fail);
        TSR_CHECK_GOTO(rc, load_vocab(t, vocab, path), fail);
    }
    TSR_CHECK_GOTO(rc, intern_bytes(t), fail);

    if (split_files) {
        snprintf(path, sizeof path, "%s/merges.txt", dir);
        TSR_CHECK_GOTO(rc, tsr_tok_read_file(path, &text, &len), fail);
    } else {
        TSR_CHECK_GOTO(rc, tsr_tok_files_merges(&files, dir, &text, &len), fail);
    }
    TSR_CHECK_GOTO(rc, load_merges(t, text, len, path), fail);
    free(text);
    text = NULL;

    TSR_CHECK_GOTO(rc, apply_specials_slow(t, &files), fail);
    TSR_CHECK_GOTO(rc, apply_specials_fast(t, &files), fail);
    TSR_CHECK_GOTO(rc, finish(t, dir), fail);
    tsr_tok_files_free(&files);
    *out = t;
    return 0;
fail:
    tsr_tok_files_free(&files);
    cJSON_Delete(root);
    free(text);
    tsr_tokenizer_free(t);
    return rc;
}

int tsr_tokenizer_load_default_pad(const char *pad, tsr_tokenizer **out)
{
    tsr_tokenizer *t = NULL;
    int rc;
    *out = NULL;
    TSR_CHECK_GOTO(rc, tokenizer_new(&t), fail);
    /* The vocabulary as CLIP builds it from the merges: the 256 byte
     * characters, the same with "</w>", each merge result, the two
     * specials. */
    int32_t id = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 256; i++) {
            char s[8];
            int n = tsr_utf8_put(byte_cp[byte_order[i]], s);
            if (pass)
                memcpy(s + n, "</w>", 4), n += 4;
            int32_t k = sym_intern(t, s, (size_t)n);
            TSR_CHECK_GOTO(rc, k, fail);
            t->syms[k].id = id++;
        }
    TSR_CHECK_GOTO(rc, intern_bytes(t), fail);
    TSR_CHECK_GOTO(rc, load_merges(t, tsr_bpe_default_merges, tsr_bpe_default_merges_len,
                                   "embedded merges"),
                   fail);
    /* Merge results in rank order get the next ids. */
    {
        int32_t *by_rank = malloc(CLIP_N_MERGES * sizeof(int32_t));
        if (!by_rank) {
            rc = tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
            goto fail;
        }
        memset(by_rank, 0xFF, CLIP_N_MERGES * sizeof(int32_t));
        for (size_t i = 0; i < t->merges_cap; i++)
            if (t->merges[i].key)
                by_rank[t->merges[i].rank] = t->merges[i].result;
        for (int r = 0; r < CLIP_N_MERGES; r++) {
            if (by_rank[r] < 0) {
                free(by_rank);
                rc = tsr_errorf(TSR_ERR_INTERNAL, "embedded merges: rank %d missing", r);
                goto fail;
            }
            t->syms[by_rank[r]].id = id++;
        }
        free(by_rank);
    }
    const char *specials[2] = {"<|startoftext|>", "<|endoftext|>"};
    for (int i = 0; i < 2; i++) {
        int32_t k = sym_intern(t, specials[i], strlen(specials[i]));
        TSR_CHECK_GOTO(rc, k, fail);
        t->syms[k].id = id++;
    }
    t->vocab_size = id;
    TSR_CHECK_GOTO(rc, set_added(t, ADD_PAD, pad, false, false), fail);
    {
        /* As CLIPTokenizer(vocab, merges, pad_token=pad) builds it. */
        tsr_tok_files files = {0};
        files.cfg[ADD_PAD] = (tsr_tok_spec){.present = true, .tok = {.content = (char *)pad}};
        rc = apply_specials_fast(t, &files);
        if (rc < 0)
            goto fail;
    }
    TSR_CHECK_GOTO(rc, finish(t, "embedded tokenizer"), fail);
    *out = t;
    return 0;
fail:
    tsr_tokenizer_free(t);
    return rc;
}

int tsr_tokenizer_load_default(tsr_tokenizer **out)
{
    return tsr_tokenizer_load_default_pad("<|endoftext|>", out);
}


void tsr_tokenizer_free(tsr_tokenizer *t)
{
    if (!t)
        return;
    cache_clear(t);
    free(t->cache);
    for (int k = 0; k < 4; k++)
        free(t->added[k].content);
    for (int i = 0; i < t->n_fadded; i++)
        free(t->fadded[i].content);
    free(t->strs);
    free(t->syms);
    free(t->sym_index);
    free(t->merges);
    free(t->id_to_sym);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

int32_t tsr_tokenizer_bos(const tsr_tokenizer *t) { return fast_mode(t) ? t->fbos : t->bos; }
int32_t tsr_tokenizer_eos(const tsr_tokenizer *t) { return fast_mode(t) ? t->feos : t->eos; }
int32_t tsr_tokenizer_pad(const tsr_tokenizer *t) { return fast_mode(t) ? t->fpad : t->pad; }
int32_t tsr_tokenizer_comma(const tsr_tokenizer *t) { return t->comma; }
int32_t tsr_tokenizer_vocab_size(const tsr_tokenizer *t) { return t->vocab_size; }

const char *tsr_tokenizer_token(const tsr_tokenizer *t, int32_t id)
{
    static _Thread_local char buf[512];
    if (id < 0 || id >= t->vocab_size || t->id_to_sym[id] < 0)
        return NULL;
    const sym *y = &t->syms[t->id_to_sym[id]];
    size_t n = y->len < sizeof buf - 1 ? y->len : sizeof buf - 1;
    memcpy(buf, t->strs + y->off, n);
    buf[n] = '\0';
    return buf;
}

int tsr_tokenizer_mode_parse(const char *name, tsr_tokenizer_mode *out)
{
    if (!name || strcmp(name, "default") == 0) {
        *out = TSR_TOKENIZER_DEFAULT;
        return 0;
    }
    if (strcmp(name, "a1111") == 0) {
        *out = TSR_TOKENIZER_A1111;
        return 0;
    }
    return tsr_errorf(TSR_ERR_INVALID, "tokenizer must be \"default\" or \"a1111\", not \"%s\"",
                      name);
}

const char *tsr_tokenizer_mode_name(tsr_tokenizer_mode mode)
{
    return mode == TSR_TOKENIZER_A1111 ? "a1111" : "default";
}

void tsr_tokenizer_set_mode(tsr_tokenizer *t, tsr_tokenizer_mode mode)
{
    t->mode = mode;
}

tsr_tokenizer_mode tsr_tokenizer_get_mode(const tsr_tokenizer *t)
{
    return t->mode;
}

void tsr_ids_free(tsr_ids *ids)
{
    free(ids->v);
    *ids = (tsr_ids){0};
}

int tsr_ids_push(tsr_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 128;
        int32_t *v = realloc(ids->v, cap * sizeof(int32_t));
        if (!v)
            return tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}
