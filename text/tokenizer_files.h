/*
 * text/tokenizer_files.h - what a tokenizer folder's JSON files say, read
 * once for both tokenizer modes.  Internal to text/.
 *
 * Why a separate reader: the two transformers versions the modes copy read
 * the same files by different rules (text/tokenizer.c applies them), so the
 * files are kept as written: every special token with its flags and where
 * it came from, the added_tokens_decoder of tokenizer_config.json, and a
 * tokenizer.json (transformers 5 saves a tokenizer as tokenizer.json +
 * tokenizer_config.json only, with no vocab.json / merges.txt).
 */
#ifndef TSR_TEXT_TOKENIZER_FILES_H
#define TSR_TEXT_TOKENIZER_FILES_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TSR_TOK_MAX_FILE (64u << 20)
/* Added tokens the default mode keeps (CLIP's files list two; a folder with
 * more can be used in the a1111 mode only). */
#define TSR_TOK_MAX_ADDED 256

enum { TSR_TOK_BOS, TSR_TOK_EOS, TSR_TOK_UNK, TSR_TOK_PAD };

/* An AddedToken.  content owned by whoever holds the struct. */
typedef struct tsr_tok_added {
    char *content;
    int32_t id; /* vocab id once resolved; from a file: its id there, else -1 */
    bool lstrip, rstrip;
    bool normalized; /* default mode: matched in normalised text */
} tsr_tok_added;

/* One special-token value as a file gives it.  transformers 5 turns a
 * string into AddedToken(special=True), which is not normalised, and an
 * object into AddedToken(**obj), whose "normalized" defaults to true in
 * tokenizer_config.json and to false in special_tokens_map.json. */
typedef struct tsr_tok_spec {
    bool present, null;
    tsr_tok_added tok;
} tsr_tok_spec;

typedef struct tsr_tok_files {
    tsr_tok_spec cfg[4], map[4]; /* bos, eos, unk, pad */
    /* tokenizer_config.json has an added_tokens_decoder (then transformers 5
     * ignores special_tokens_map.json and tokenizer.json's added_tokens). */
    bool has_decoder;
    /* The added tokens listed before the specials: the added_tokens_decoder,
     * else tokenizer.json's added_tokens; sorted by id. */
    tsr_tok_added listed[TSR_TOK_MAX_ADDED];
    int n_listed;
    bool too_many;
    cJSON *tokenizer_json; /* tokenizer.json, or NULL */
} tsr_tok_files;

/* Read DIR/tokenizer_config.json, special_tokens_map.json and
 * tokenizer.json, each optional.  *f is overwritten; free with
 * tsr_tok_files_free (also after a failure). */
int tsr_tok_files_read(const char *dir, tsr_tok_files *f);
void tsr_tok_files_free(tsr_tok_files *f);

/* tokenizer.json's BPE model: its "vocab" object, and its "merges" (pairs
 * or "a b" strings) as merges.txt text with a "#version" first line (*text
 * owned by the caller). */
int tsr_tok_files_vocab(const tsr_tok_files *f, const char *dir, const cJSON **vocab);
int tsr_tok_files_merges(const tsr_tok_files *f, const char *dir, char **text, size_t *len);

/* A whole file (at most TSR_TOK_MAX_FILE bytes), NUL-terminated; *out owned. */
int tsr_tok_read_file(const char *path, char **out, size_t *len);

#endif
