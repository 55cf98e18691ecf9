/*
 * fuzz/fuzz_prompt.c - libFuzzer driver for the prompt parser and the CLIP
 * tokenizer (text/prompt.h, text/tokenizer.h).
 *
 * Why both at once: prompts reach the tokenizer only through the parser, and
 * each parsed segment goes through ftfy-style cleanup, the pre-tokeniser and
 * BPE; hostile bytes (invalid UTF-8, deep brackets, entities, huge weights)
 * must give a result or a clear error, never a crash.  The first input byte
 * selects options (emphasis on/off, comma backtrack, tokenizer mode) so all
 * paths are explored.  The embedded tokenizer is loaded once.
 */
#include <stddef.h>
#include <stdint.h>

#include "text/prompt.h"
#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tsr_tokenizer *tok;
    if (!tok && tsr_tokenizer_load_default(&tok) < 0)
        return 0;
    if (size == 0)
        return 0;
    tsr_prompt_options opt;
    tsr_prompt_options_init(&opt);
    opt.emphasis = (data[0] & 1) == 0;
    opt.comma_backtrack = (data[0] >> 1) % 40;
    tsr_tokenizer_set_mode(tok, (data[0] & 0x80) ? TSR_TOKENIZER_A1111 : TSR_TOKENIZER_DEFAULT);
    opt.max_chunks = 64;
    tsr_prompt_tokens t;
    if (tsr_prompt_tokenize(tok, (const char *)data + 1, size - 1, &opt, &t) == 0) {
        for (int i = 0; i < t.n_chunks * TSR_CLIP_MAX_LENGTH; i++)
            if (t.ids[i] < 0 || t.ids[i] >= tsr_tokenizer_vocab_size(tok))
                __builtin_trap();
        tsr_prompt_tokens_free(&t);
    }
    int32_t w[TSR_CLIP_MAX_LENGTH];
    (void)tsr_tokenizer_encode_window(tok, (const char *)data + 1, size - 1, w);
    return 0;
}
