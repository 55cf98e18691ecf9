/*
 * text/tokenizer_int.h - the tokenizer's inside, shared by its two halves:
 * text/tokenizer.c (loading: vocabulary, merges, special tokens) and
 * text/tokenizer_bpe.c (encoding: cleanup, pre-tokenisation, BPE, cache).
 * Not part of any public header.
 */
#ifndef TSR_TEXT_TOKENIZER_INT_H
#define TSR_TEXT_TOKENIZER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "text/tokenizer.h"
#include "text/tokenizer_files.h"

#define CACHE_CAP 16384 /* entries; the cache is emptied when half full */
#define CACHE_MAX_WORD 256

typedef struct sym {
    uint32_t off, len; /* in strs */
    int32_t id;        /* vocab id or -1 */
} sym;

typedef struct merge_slot {
    uint64_t key; /* (a << 32 | b) + 1; 0 = empty */
    int32_t rank, result;
} merge_slot;

typedef struct cache_slot {
    char *word;   /* owned; NULL = empty */
    int32_t *ids; /* owned */
    uint32_t n;
    bool strict; /* BPE of the default mode (symbols outside the vocab never merge) */
} cache_slot;

typedef tsr_tok_added added_token; /* content owned */

#define MAX_FAST_ADDED TSR_TOK_MAX_ADDED

struct tsr_tokenizer {
    char *strs; /* all symbol strings, owned */
    size_t strs_n, strs_cap;
    sym *syms;
    size_t n_syms, syms_cap;
    int32_t *sym_index; /* open addressing: string -> sym; -1 empty */
    size_t index_cap;
    merge_slot *merges;
    size_t merges_cap;
    int32_t byte_sym[256], byte_sym_w[256];
    int32_t *id_to_sym; /* vocab id -> sym, -1 for holes */
    int32_t vocab_size;
    int32_t bos, eos, unk, pad, comma, sot_id, eot_id;
    added_token added[4]; /* a1111 mode: bos, eos, unk, pad */
    int n_added;
    /* Default mode (transformers 5): its own specials and added tokens,
     * which its loader reads differently from the same files. */
    int32_t fbos, feos, funk, fpad;
    added_token fadded[MAX_FAST_ADDED];
    int n_fadded;
    bool fast_too_many; /* more added tokens than MAX_FAST_ADDED */
    tsr_tokenizer_mode mode;
    cache_slot *cache;
    size_t cache_used;
    pthread_mutex_t lock;
};

static inline uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static inline merge_slot *merge_slot_for(const tsr_tokenizer *t, uint64_t key)
{
    size_t mask = t->merges_cap - 1;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
    while (t->merges[i].key && t->merges[i].key != key)
        i = (i + 1) & mask;
    return &t->merges[i];
}

static inline void cache_clear(tsr_tokenizer *t)
{
    for (size_t i = 0; t->cache && i < CACHE_CAP; i++) {
        free(t->cache[i].word);
        free(t->cache[i].ids);
        t->cache[i] = (cache_slot){0};
    }
    t->cache_used = 0;
}

static inline bool fast_mode(const tsr_tokenizer *t) { return t->mode == TSR_TOKENIZER_DEFAULT; }

#endif
