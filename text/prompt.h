/*
 * text/prompt.h - A1111-compatible prompt syntax: emphasis weights, BREAK,
 * and chunking of long prompts into 77-token windows.
 *
 * Why A1111's algorithm verbatim (modules/prompt_parser.py
 * parse_prompt_attention and sd_hijack_clip.py tokenize_line): users paste
 * prompts written for it, including its odd corners (unbalanced brackets
 * close at the end, a lone backslash vanishes, BREAK inside brackets is a
 * word).  docs/prompts.md gives the grammar; tests/text/ compare with a
 * Python reimplementation on hundreds of prompts.
 *
 * What a text encoder gets: per prompt, n_chunks windows of 77 ids, each
 * [BOS] up to 75 tokens [EOS] [PAD]..., and one weight per id (1.0 on
 * BOS/EOS/PAD).  Encode each window, concatenate along the sequence, scale
 * each hidden state by its weight and restore the original mean (A1111).
 * A plain prompt of <= 75 tokens gives exactly CLIPTokenizer's window with
 * all weights 1.0.
 */
#ifndef TSR_TEXT_PROMPT_H
#define TSR_TEXT_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

/* One run of text with its weight.  weight == -1 with text "BREAK" is a
 * chunk break (A1111's marker). */
typedef struct tsr_prompt_segment {
    char *text; /* owned, UTF-8 */
    double weight;
} tsr_prompt_segment;

typedef struct tsr_prompt_parsed {
    tsr_prompt_segment *seg; /* owned */
    size_t n;
} tsr_prompt_parsed;

/* parse_prompt_attention: never fails on syntax except a weight that is
 * not a number ("(a:1.2.3)", where A1111 raises): TSR_ERR_INVALID. */
int tsr_prompt_parse(const char *prompt, size_t len, tsr_prompt_parsed *out);
void tsr_prompt_parsed_free(tsr_prompt_parsed *p);

/* A textual-inversion embedding as the chunker sees it (A1111's
 * EmbeddingDatabase.ids_lookup): the name's tokens under this tokenizer and
 * how many vectors replace them. */
typedef struct tsr_prompt_embedding {
    const int32_t *ids; /* the name tokenized, no BOS/EOS (borrowed) */
    int n_ids;
    int n_vectors;      /* 1..75 */
} tsr_prompt_embedding;

typedef struct tsr_prompt_options {
    bool emphasis;       /* parse the syntax (true); false = the text as is */
    int comma_backtrack; /* A1111 comma_padding_backtrack (20; 0 = off) */
    int max_chunks;      /* 0 = no limit; more is TSR_ERR_RANGE */
    /* Embeddings matched in the text (NULL = none), longest name first
     * (A1111's order; ties in the array's order).  Borrowed. */
    const tsr_prompt_embedding *embeddings;
    int n_embeddings;
} tsr_prompt_options;

void tsr_prompt_options_init(tsr_prompt_options *o);

typedef struct tsr_prompt_tokens {
    int n_chunks;
    int32_t *ids;   /* n_chunks * 77, owned */
    float *weights; /* n_chunks * 77, owned */
    /* n_chunks * 77, owned: -1, or embedding e's vector k at this position
     * as TSR_PROMPT_FIX(e, k) (its id is then 0, as A1111 writes) */
    int32_t *fix;
} tsr_prompt_tokens;

#define TSR_PROMPT_FIX(e, k) ((int32_t)((e) * 128 + (k)))
#define TSR_PROMPT_FIX_EMB(f) ((f) / 128)
#define TSR_PROMPT_FIX_VEC(f) ((f) % 128)

/* Parse + tokenize + chunk one prompt.  opt may be NULL (defaults). */
int tsr_prompt_tokenize(tsr_tokenizer *tok, const char *prompt, size_t len,
                        const tsr_prompt_options *opt, tsr_prompt_tokens *out);

/* Append empty windows (the empty prompt's: BOS EOS PAD..., weights 1)
 * until t has n_chunks, so that a batch (e.g. prompt and negative prompt)
 * shares one sequence length. */
int tsr_prompt_tokens_pad_chunks(tsr_prompt_tokens *t, const tsr_tokenizer *tok, int n_chunks);

void tsr_prompt_tokens_free(tsr_prompt_tokens *t);

#endif
