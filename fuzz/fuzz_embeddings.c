/*
 * fuzz/fuzz_embeddings.c - libFuzzer driver for textual-inversion embedding
 * files (model/embeddings.h) and the prompt chunker's name matching
 * (text/prompt.h with tsr_prompt_options.embeddings).
 *
 * Why these two: an embedding file is bytes from a folder an operator fills
 * from the internet, and a prompt is text from any client; both feed a
 * table the text encoders index without further checks.  The first byte
 * picks the target; the rest is its input.  Invariants are checked, not
 * only crashes: a loaded embedding has 1..75 vectors of exactly the widths
 * asked for, all finite; every marked position of a tokenized prompt names
 * a listed embedding and one of its vectors, carries id 0, and an
 * embedding's vectors sit consecutively in one chunk (never split across
 * two, since a chunk they do not fit is closed first).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/embeddings.h"
#include "text/prompt.h"
#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_file(const uint8_t *data, size_t size, int sdxl)
{
    static const int dims[2] = {16, 32};
    tsr_ti_embedding e;
    int v, s;
    if (tsr_embedding_load_memory(data, size, "fuzz", dims, sdxl ? 2 : 1, &e, &v, &s) < 0) {
        tsr_error_clear();
        return;
    }
    if (e.n_vectors < 1 || e.n_vectors > TSR_EMB_MAX_VECTORS || e.n_parts != (sdxl ? 2 : 1))
        __builtin_trap();
    for (int p = 0; p < e.n_parts; p++) {
        if (e.dim[p] != dims[p])
            __builtin_trap();
        for (size_t i = 0; i < (size_t)e.n_vectors * e.dim[p]; i++)
            if (!isfinite(e.vec[p][i]))
                __builtin_trap();
    }
    tsr_ti_embedding_free(&e);
}

static void check_prompt(const char *text)
{
    static tsr_tokenizer *tok;
    static tsr_ids names[4];
    static tsr_prompt_embedding pe[4];
    if (!tok) {
        /* ", y" starts with the comma token: never a backtrack point */
        static const char *const nm[4] = {"tiemb", "ti emb", "x", ", y"};
        static const int nv[4] = {3, 75, 1, 2};
        if (tsr_tokenizer_load_default(&tok) < 0)
            return;
        for (int i = 0; i < 4; i++) {
            if (tsr_tokenizer_encode(tok, nm[i], strlen(nm[i]), &names[i]) < 0)
                return;
            pe[i] = (tsr_prompt_embedding){names[i].v, (int)names[i].n, nv[i]};
        }
    }
    tsr_prompt_options o;
    tsr_prompt_options_init(&o);
    o.embeddings = pe;
    o.n_embeddings = 4;
    o.max_chunks = 64;
    tsr_prompt_tokens t;
    if (tsr_prompt_tokenize(tok, text, strlen(text), &o, &t) < 0) {
        tsr_error_clear();
        return;
    }
    for (int c = 0; c < t.n_chunks; c++) {
        const int32_t *f = t.fix + (size_t)c * 77, *ids = t.ids + (size_t)c * 77;
        for (int p = 0; p < 77; p++) {
            if (f[p] < 0)
                continue;
            const int e = TSR_PROMPT_FIX_EMB(f[p]), k = TSR_PROMPT_FIX_VEC(f[p]);
            if (e < 0 || e >= 4 || k >= pe[e].n_vectors || ids[p] != 0 || p == 0 || p == 76)
                __builtin_trap();
            /* vector k > 0 follows vector k - 1 of the same embedding */
            if (k > 0 && f[p - 1] != TSR_PROMPT_FIX(e, k - 1))
                __builtin_trap();
            /* the last vector is followed by something else in this chunk */
            if (k + 1 < pe[e].n_vectors && (p + 1 >= 77 || f[p + 1] != TSR_PROMPT_FIX(e, k + 1)))
                __builtin_trap();
        }
    }
    tsr_prompt_tokens_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 16))
        return 0;
    switch (data[0] % 3) {
    case 0:
    case 1:
        check_file(data + 1, size - 1, data[0] % 3);
        break;
    default: {
        char *s = malloc(size);
        if (!s)
            return 0;
        memcpy(s, data + 1, size - 1);
        s[size - 1] = '\0';
        check_prompt(s);
        free(s);
        break;
    }
    }
    return 0;
}
