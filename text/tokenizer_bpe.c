/*
 * text/tokenizer_bpe.c - CLIP BPE, the encoding half (text/tokenizer.c
 * loads; text/tokenizer_int.h is what both see): the text cleanup, the
 * pre-tokenisation of each mode, the BPE of each pre-token and its cache.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/tokenizer_int.h"
#include "text/unicode.h"
#include "text/unicode_clip.h"

/* ---- BPE ---- */

/* BPE of one pre-token (its UTF-8 bytes), as CLIPTokenizer.bpe: merge the
 * lowest-ranked adjacent pair, all its occurrences left to right, until no
 * pair has a rank.  Appends vocab ids (UNK for symbols outside the vocab). */
static int bpe_word(tsr_tokenizer *t, const unsigned char *w, size_t n, bool strict, tsr_ids *out)
{
    int32_t stack[64];
    int32_t *s = n <= 64 ? stack : malloc(n * sizeof(int32_t));
    if (!s)
        return tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < n; i++) {
        s[i] = i + 1 < n ? t->byte_sym[w[i]] : t->byte_sym_w[w[i]];
        /* tokenizers' BPE maps a character outside the vocabulary to UNK
         * before merging; the slow tokenizer merges strings. */
        if (strict && t->syms[s[i]].id < 0)
            s[i] = -1;
    }
    size_t len = n;
    while (len > 1) {
        int32_t best_rank = INT32_MAX, best_a = -1, best_b = -1, best_r = -1;
        for (size_t i = 0; i + 1 < len; i++) {
            if (s[i] < 0 || s[i + 1] < 0)
                continue;
            uint64_t key = (((uint64_t)s[i] << 32) | (uint32_t)s[i + 1]) + 1;
            const merge_slot *m = merge_slot_for(t, key);
            if (m->key && m->rank < best_rank) {
                best_rank = m->rank;
                best_a = s[i];
                best_b = s[i + 1];
                best_r = m->result;
            }
        }
        if (best_r < 0)
            break;
        size_t o = 0;
        for (size_t i = 0; i < len; i++) {
            if (i + 1 < len && s[i] == best_a && s[i + 1] == best_b) {
                s[o++] = best_r;
                i++;
            } else {
                s[o++] = s[i];
            }
        }
        len = o;
    }
    int rc = 0;
    int32_t unk = strict ? t->funk : t->unk;
    for (size_t i = 0; i < len && rc == 0; i++) {
        int32_t id = s[i] >= 0 ? t->syms[s[i]].id : -1;
        rc = tsr_ids_push(out, id >= 0 ? id : unk);
    }
    if (s != stack)
        free(s);
    return rc;
}

static int bpe_cached(tsr_tokenizer *t, const unsigned char *w, size_t n, bool strict,
                      tsr_ids *out)
{
    if (n > CACHE_MAX_WORD)
        return bpe_word(t, w, n, strict, out);
    uint64_t h = hash_bytes((const char *)w, n) ^ (uint64_t)strict;
    int rc = 0;
    pthread_mutex_lock(&t->lock);
    size_t i = h & (CACHE_CAP - 1);
    for (; t->cache[i].word; i = (i + 1) & (CACHE_CAP - 1)) {
        cache_slot *c = &t->cache[i];
        if (c->strict == strict && strlen(c->word) == n && memcmp(c->word, w, n) == 0) {
            for (uint32_t k = 0; k < c->n && rc == 0; k++)
                rc = tsr_ids_push(out, c->ids[k]);
            pthread_mutex_unlock(&t->lock);
            return rc;
        }
    }
    size_t before = out->n;
    rc = bpe_word(t, w, n, strict, out);
    if (rc == 0 && memchr(w, 0, n) == NULL) {
        if (t->cache_used * 2 >= CACHE_CAP) {
            cache_clear(t);
            for (i = h & (CACHE_CAP - 1); t->cache[i].word; i = (i + 1) & (CACHE_CAP - 1)) {
            }
        }
        cache_slot *c = &t->cache[i];
        size_t k = out->n - before;
        c->word = malloc(n + 1);
        c->ids = malloc((k ? k : 1) * sizeof(int32_t));
        if (c->word && c->ids) {
            memcpy(c->word, w, n);
            c->word[n] = '\0';
            memcpy(c->ids, out->v + before, k * sizeof(int32_t));
            c->n = (uint32_t)k;
            c->strict = strict;
            t->cache_used++;
        } else {
            free(c->word);
            free(c->ids);
            *c = (cache_slot){0};
        }
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

/* CLIPTokenizer._tokenize on one piece (code points) -> ids. */
static int tokenize_piece(tsr_tokenizer *t, const uint32_t *s, size_t n, tsr_ids *out)
{
    tsr_u32buf clean = {0};
    unsigned char *bytes = NULL;
    int rc = 0;
    TSR_CHECK_GOTO(rc, tsr_clip_clean(s, n, &clean), cleanup);
    if (clean.n > SIZE_MAX / 4) {
        rc = tsr_errorf(TSR_ERR_RANGE, "tokenizer: text too long");
        goto cleanup;
    }
    bytes = malloc(clean.n * 4 + 1);
    if (!bytes) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
        goto cleanup;
    }
    size_t pos = 0, start, len;
    while ((len = tsr_clip_next_token(clean.v, clean.n, &pos, &start)) > 0) {
        size_t nb = 0;
        for (size_t i = start; i < start + len; i++)
            nb += (size_t)tsr_utf8_put(clean.v[i], (char *)bytes + nb);
        /* The cache is seeded with the two specials, which map to
         * themselves (no "</w>"). */
        if (nb == 15 && memcmp(bytes, "<|startoftext|>", 15) == 0) {
            TSR_CHECK_GOTO(rc, tsr_ids_push(out, t->sot_id >= 0 ? t->sot_id : t->unk), cleanup);
            continue;
        }
        if (nb == 13 && memcmp(bytes, "<|endoftext|>", 13) == 0) {
            TSR_CHECK_GOTO(rc, tsr_ids_push(out, t->eot_id >= 0 ? t->eot_id : t->unk), cleanup);
            continue;
        }
        TSR_CHECK_GOTO(rc, bpe_cached(t, bytes, nb, false, out), cleanup);
    }
cleanup:
    free(bytes);
    tsr_u32_free(&clean);
    return rc;
}

/* Default mode: the pre-tokeniser and BPE on one normalised piece.  The
 * ByteLevel step re-splits each Split match with GPT-2's pattern, which
 * leaves every match whole except the literals <|startoftext|> and
 * <|endoftext|>: those become "<|", the name, "|>". */
static int tokenize_piece_fast(tsr_tokenizer *t, const uint32_t *s, size_t n, tsr_ids *out)
{
    unsigned char *bytes = NULL;
    int rc = 0;
    if (n > SIZE_MAX / 4)
        return tsr_errorf(TSR_ERR_RANGE, "tokenizer: text too long");
    bytes = malloc(n * 4 + 1);
    if (!bytes)
        return tsr_errorf(TSR_ERR_NOMEM, "tokenizer: out of memory");
    size_t pos = 0, start, len;
    bool special;
    while ((len = tsr_clip_next_token_fast(s, n, &pos, &start, &special)) > 0) {
        size_t nb = 0;
        for (size_t i = start; i < start + len; i++)
            nb += (size_t)tsr_utf8_put(s[i], (char *)bytes + nb);
        if (special) {
            TSR_CHECK_GOTO(rc, bpe_cached(t, bytes, 2, true, out), cleanup);
            TSR_CHECK_GOTO(rc, bpe_cached(t, bytes + 2, nb - 4, true, out), cleanup);
            TSR_CHECK_GOTO(rc, bpe_cached(t, bytes + nb - 2, 2, true, out), cleanup);
        } else {
            TSR_CHECK_GOTO(rc, bpe_cached(t, bytes, nb, true, out), cleanup);
        }
    }
cleanup:
    free(bytes);
    return rc;
}

static bool is_py_space(uint32_t c)
{
    return c == ' ' || (c < 0x80 ? (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x1F)
                                 : tsr_u_in(tsr_u_py_space, tsr_u_py_space_n, c));
}

typedef int (*piece_fn)(tsr_tokenizer *t, const uint32_t *s, size_t n, tsr_ids *out);

/* Cut s at the added tokens in list[0..n_list) whose `normalized` flag is
 * `norm` (-1: all), taking the longest match at the leftmost position;
 * `fn` handles the text between, each match pushes its id.  lstrip/rstrip
 * drop the whitespace (`space`) beside a match.  match_norm: the tokens'
 * texts are normalised as the text was (the default mode's normalised
 * tokens). */
static int split_added(tsr_tokenizer *t, const added_token *list, int n_list, int norm,
                       bool match_norm, bool (*space)(uint32_t), const uint32_t *s, size_t n,
                       piece_fn fn, tsr_ids *out)
{
    tsr_u32buf added = {0}, raw = {0};
    size_t aoff[MAX_FAST_ADDED + 1] = {0};
    int rc = 0;
    for (int k = 0; k < n_list; k++) {
        aoff[k] = added.n;
        if (list[k].content && (norm < 0 || list[k].normalized == (norm == 1))) {
            if (match_norm) {
                raw.n = 0;
                TSR_CHECK_GOTO(rc, tsr_u32_push_utf8(&raw, list[k].content), cleanup);
                TSR_CHECK_GOTO(rc, tsr_clip_normalize_fast(raw.v, raw.n, &added), cleanup);
            } else {
                TSR_CHECK_GOTO(rc, tsr_u32_push_utf8(&added, list[k].content), cleanup);
            }
        }
    }
    aoff[n_list] = added.n;
    size_t piece = 0, i = 0;
    bool strip_left_next = false;
    while (i <= n) {
        int hit = -1;
        size_t hit_len = 0;
        for (int k = 0; i < n && k < n_list; k++) {
            size_t l = aoff[k + 1] - aoff[k];
            if (l == 0 || l > n - i || l <= hit_len)
                continue;
            if (memcmp(s + i, added.v + aoff[k], l * sizeof(uint32_t)) == 0)
                hit = k, hit_len = l;
        }
        if (hit < 0 && i < n) {
            i++;
            continue;
        }
        size_t a = piece, b = i;
        if (strip_left_next)
            while (a < b && space(s[a]))
                a++;
        if (hit >= 0 && list[hit].lstrip)
            while (b > a && space(s[b - 1]))
                b--;
        if (b > a)
            TSR_CHECK_GOTO(rc, fn(t, s + a, b - a, out), cleanup);
        if (hit < 0)
            break;
        TSR_CHECK_GOTO(rc, tsr_ids_push(out, list[hit].id), cleanup);
        strip_left_next = list[hit].rstrip;
        i += hit_len;
        piece = i;
    }
cleanup:
    tsr_u32_free(&added);
    tsr_u32_free(&raw);
    return rc;
}

/* Default mode, a piece of raw text between non-normalised added tokens:
 * normalise it, then cut it at the normalised ones. */
static int normalize_piece_fast(tsr_tokenizer *t, const uint32_t *s, size_t n, tsr_ids *out)
{
    tsr_u32buf norm = {0};
    int rc = tsr_clip_normalize_fast(s, n, &norm);
    if (rc == 0)
        rc = split_added(t, t->fadded, t->n_fadded, 1, true, tsr_uf_space_cp, norm.v, norm.n,
                         tokenize_piece_fast, out);
    tsr_u32_free(&norm);
    return rc;
}

int tsr_tokenizer_encode(tsr_tokenizer *t, const char *text, size_t len, tsr_ids *out)
{
    if (len > TSR_TOKENIZER_MAX_INPUT)
        return tsr_errorf(TSR_ERR_RANGE, "prompt: %zu bytes is over the %u byte limit", len,
                          TSR_TOKENIZER_MAX_INPUT);
    if (fast_mode(t) && t->fast_too_many)
        return tsr_errorf(TSR_ERR_UNSUPPORTED,
                          "tokenizer: more than %d added tokens; use the a1111 tokenizer mode",
                          MAX_FAST_ADDED);
    tsr_u32buf cps = {0};
    int rc = tsr_utf8_decode(text, len, &cps, "prompt");
    if (rc == 0) {
        if (fast_mode(t))
            /* tokenizers' AddedVocabulary: non-normalised tokens on the raw
             * text first, normalised ones on each normalised piece. */
            rc = split_added(t, t->fadded, t->n_fadded, 0, false, tsr_uf_space_cp, cps.v, cps.n,
                             normalize_piece_fast, out);
        else
            /* PreTrainedTokenizer.tokenize: split on the added tokens before
             * _tokenize cleans each piece. */
            rc = split_added(t, t->added, t->n_added, -1, false, is_py_space, cps.v, cps.n,
                             tokenize_piece, out);
    }
    tsr_u32_free(&cps);
    return rc;
}

int tsr_tokenizer_encode_window(tsr_tokenizer *t, const char *text, size_t len,
                                int32_t out[TSR_CLIP_MAX_LENGTH])
{
    if (tsr_tokenizer_pad(t) < 0)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "tokenizer: no pad token (pad_token is null)");
    tsr_ids ids = {0};
    int rc = tsr_tokenizer_encode(t, text, len, &ids);
    if (rc < 0) {
        tsr_ids_free(&ids);
        return rc;
    }
    size_t n = ids.n < TSR_CLIP_CHUNK ? ids.n : TSR_CLIP_CHUNK;
    int k = 0;
    out[k++] = tsr_tokenizer_bos(t);
    for (size_t i = 0; i < n; i++)
        out[k++] = ids.v[i];
    out[k++] = tsr_tokenizer_eos(t);
    int used = k;
    while (k < TSR_CLIP_MAX_LENGTH)
        out[k++] = tsr_tokenizer_pad(t);
    tsr_ids_free(&ids);
    return used;
}
