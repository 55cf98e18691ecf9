/*
 * text/tokenizer.h - the CLIP byte-level BPE tokenizer, identical to
 * transformers' CLIPTokenizer in either of two modes:
 *
 *   TSR_TOKENIZER_DEFAULT  transformers >= 5's CLIPTokenizer (backed by the
 *                          `tokenizers` library; transformers 4's
 *                          CLIPTokenizerFast but for special-token text):
 *                          what diffusers runs today.
 *                          NFC, whitespace runs -> " ", per-character
 *                          lowercase; no ftfy, no HTML unescaping.
 *   TSR_TOKENIZER_A1111    transformers 4's slow CLIPTokenizer with ftfy
 *                          installed, as AUTOMATIC1111's web UI runs it.
 *
 * docs/prompts.md lists where they differ (curly quotes, HTML entities,
 * control characters, special-token text, ...).
 *
 * Why its own implementation and not a generic BPE: Stable Diffusion's
 * conditioning depends on every id, and CLIPTokenizer's behaviour is the
 * sum of quirks (added-token splitting before cleaning, ftfy, a regex with
 * IGNORECASE, Python's lowercasing, a merge list cut at 48,894 entries).
 * Each is reproduced and checked against transformers on >= 2,000 prompts
 * (tests/text/).
 *
 * The pipeline for one text: split on the added tokens (BOS, EOS, UNK and
 * PAD strings) -> per piece: ftfy.fix_text, whitespace collapse + strip,
 * str.lower, CLIP's pre-tokenisation pattern, bytes_to_unicode, BPE by merge
 * rank (cached) -> vocab ids.
 *
 * Thread safety: a loaded tokenizer may be shared by threads; the BPE cache
 * is guarded by a mutex.
 */
#ifndef TSR_TEXT_TOKENIZER_H
#define TSR_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define TSR_CLIP_MAX_LENGTH 77 /* model_max_length: BOS + 75 + EOS */
#define TSR_CLIP_CHUNK 75      /* content tokens per window */

typedef struct tsr_tokenizer tsr_tokenizer;

typedef enum tsr_tokenizer_mode {
    TSR_TOKENIZER_DEFAULT = 0, /* transformers >= 5 CLIPTokenizer (tokenizers) */
    TSR_TOKENIZER_A1111 = 1,   /* transformers 4 slow CLIPTokenizer + ftfy (A1111) */
} tsr_tokenizer_mode;

/* NULL or "default" -> DEFAULT, "a1111" -> A1111, else TSR_ERR_INVALID. */
int tsr_tokenizer_mode_parse(const char *name, tsr_tokenizer_mode *out);
const char *tsr_tokenizer_mode_name(tsr_tokenizer_mode mode);

/* Load from a folder holding vocab.json and merges.txt (or, as transformers
 * 5 saves a tokenizer, tokenizer.json), plus optional
 * tokenizer_config.json / special_tokens_map.json for the special tokens
 * (bos/eos/unk/pad, each a string or an AddedToken object; the pad token is
 * taken from these files, never guessed; without them transformers'
 * defaults apply: all four "<|endoftext|>" except bos "<|startoftext|>").
 * *out is owned by the caller (tsr_tokenizer_free). */
int tsr_tokenizer_load(const char *dir, tsr_tokenizer **out);

/* The embedded default: OpenAI CLIP's BPE (bpe_simple_vocab_16e6, via
 * open-clip-torch, MIT), with SD 1.x's special tokens (pad = EOS).  For
 * single-file checkpoints that carry no tokenizer. */
int tsr_tokenizer_load_default(tsr_tokenizer **out);

/* The same, with `pad` as the pad token string (e.g. "!" for OpenCLIP-based
 * encoders); it must be in the vocabulary. */
int tsr_tokenizer_load_default_pad(const char *pad, tsr_tokenizer **out);

void tsr_tokenizer_free(tsr_tokenizer *t);

/* A loaded tokenizer starts in TSR_TOKENIZER_DEFAULT.  Set the mode before
 * sharing the tokenizer between threads.  The special-token ids below are
 * the mode's: the two transformers versions read the same
 * tokenizer_config.json / special_tokens_map.json differently (transformers
 * 5 ignores special_tokens_map.json when tokenizer_config.json has an
 * added_tokens_decoder). */
void tsr_tokenizer_set_mode(tsr_tokenizer *t, tsr_tokenizer_mode mode);
tsr_tokenizer_mode tsr_tokenizer_get_mode(const tsr_tokenizer *t);

int32_t tsr_tokenizer_bos(const tsr_tokenizer *t);
int32_t tsr_tokenizer_eos(const tsr_tokenizer *t);
int32_t tsr_tokenizer_pad(const tsr_tokenizer *t);
/* Id of ",</w>" (A1111's comma for chunk breaking), or -1. */
int32_t tsr_tokenizer_comma(const tsr_tokenizer *t);
int32_t tsr_tokenizer_vocab_size(const tsr_tokenizer *t);
/* The vocabulary string of `id` (byte-encoded, "</w>" kept), or NULL.
 * Borrowed from the tokenizer. */
const char *tsr_tokenizer_token(const tsr_tokenizer *t, int32_t id);

/* A growable id list.  `v` is owned by whoever holds the struct. */
typedef struct tsr_ids {
    int32_t *v;
    size_t n, cap;
} tsr_ids;
void tsr_ids_free(tsr_ids *ids);
int tsr_ids_push(tsr_ids *ids, int32_t id);

/* tokenizer(text, add_special_tokens=False)["input_ids"]: all tokens of
 * `text` (len bytes of UTF-8; invalid UTF-8 is TSR_ERR_INVALID), no BOS/EOS,
 * untruncated, appended to `out`.  Input is capped at
 * TSR_TOKENIZER_MAX_INPUT bytes (TSR_ERR_RANGE above). */
#define TSR_TOKENIZER_MAX_INPUT (1u << 20)
int tsr_tokenizer_encode(tsr_tokenizer *t, const char *text, size_t len, tsr_ids *out);

/* tokenizer(text, padding="max_length", max_length=77, truncation=True):
 * BOS, the first 75 tokens, EOS, then pad ids up to 77.  Returns the number
 * of tokens before padding (2..77). */
int tsr_tokenizer_encode_window(tsr_tokenizer *t, const char *text, size_t len,
                                int32_t out[TSR_CLIP_MAX_LENGTH]);

#endif
