/*
 * text/conditioner.h - prompts to the conditioning a UNet consumes.
 *
 * One object per model ties together what each family needs: its
 * tokenizer(s), its text encoder(s) and the rule for which hidden state to
 * take.  Prompts go through A1111's syntax (text/prompt.h), are split into
 * 77-token windows, and every window of every prompt in a call is encoded in
 * one batched encoder call.  Windows are concatenated along the sequence;
 * emphasis scales each hidden state by its token's weight and restores the
 * window's original mean, as A1111 does (per prompt, so an image's
 * conditioning never depends on the other prompts in its batch).
 *
 *   SD 1.x  CLIP-L, hidden state `clip_skip` from the end (1 = last), final
 *           layer norm applied.
 *   SD 2.x  OpenCLIP-H as diffusers ships it (23 layers), same rule.
 *   SDXL    CLIP-L and OpenCLIP-bigG penultimate states (+ clip_skip - 1),
 *           no final norm, concatenated (768 + 1280 = 2048), and the pooled
 *           output of encoder 2 through text_projection (from the first
 *           window).  The refiner has only encoder 2.
 *
 * The empty prompt's conditioning is computed once per clip_skip and cached.
 */
#ifndef TSR_TEXT_CONDITIONER_H
#define TSR_TEXT_CONDITIONER_H

#include "backend/backend.h"
#include "model/model.h"
#include "text/tokenizer.h"

typedef struct tsr_text_cond tsr_text_cond;

/* Conditioning for one prompt.  Arrays owned (tsr_text_embedding_free). */
typedef struct tsr_text_embedding {
    int n_tokens;   /* 77 * windows */
    int dim;        /* context width (cross_attention_dim) */
    float *context; /* [n_tokens, dim] */
    int pooled_dim; /* 0 when the family has none */
    float *pooled;  /* [pooled_dim] or NULL */
} tsr_text_embedding;

void tsr_text_embedding_free(tsr_text_embedding *e);
/* Deep copy; *dst is overwritten (owned by the caller). */
int tsr_text_embedding_copy(tsr_text_embedding *dst, const tsr_text_embedding *src);

/* Load tokenizers and encoders of `model` onto `backend` (both borrowed,
 * must outlive the conditioner).  Single files without tokenizer folders
 * use the embedded CLIP vocabulary with the family's pad token. */
int tsr_text_cond_open(const tsr_model *model, tsr_backend *backend, tsr_text_cond **out);
void tsr_text_cond_free(tsr_text_cond *c);
/* Same, borrowing the encoders' weights of `src` (a conditioner of the same
 * model on a backend with the same weight layout, read-only: it must
 * outlive this one) instead of loading them: engine replicas
 * (tsr_engine_open_replica). */
int tsr_text_cond_open_shared(const tsr_model *model, tsr_backend *backend,
                              const tsr_text_cond *src, tsr_text_cond **out);
/* Same, with the encoders' weights given (weights[k] for the k-th encoder
 * the model has, already on `backend`: a broadcast replica's own copy).
 * Takes them: the conditioner frees them, on failure too (every entry is
 * set to NULL). */
int tsr_text_cond_open_given(const tsr_model *model, tsr_backend *backend, tsr_weights *weights[2],
                             tsr_text_cond **out);

/* Tokenizer mode of every encoder's tokenizer (TSR_TOKENIZER_DEFAULT after
 * open); drops the cached empty-prompt conditioning. */
void tsr_text_cond_set_tokenizer(tsr_text_cond *c, tsr_tokenizer_mode mode);

int tsr_text_cond_dim(const tsr_text_cond *c);
int tsr_text_cond_pooled_dim(const tsr_text_cond *c);
/* The largest clip skip these encoders can give (<= 12). */
int tsr_text_cond_max_clip_skip(const tsr_text_cond *c);

/* Encode n prompts (UTF-8, NUL-terminated) in one batched call.
 * clip_skip: 1 = the family's default layer; larger takes earlier layers.
 * out[0..n) are filled (owned by the caller) or all left empty on error. */
int tsr_text_cond_encode(tsr_text_cond *c, const char *const *prompts, int n, int clip_skip,
                         tsr_text_embedding *out);

/* The empty prompt's conditioning (cached; borrowed from c). */
int tsr_text_cond_empty(tsr_text_cond *c, int clip_skip, const tsr_text_embedding **out);

/* LoRAs for the following encode calls (borrowed until replaced; NULL =
 * none): each encoder applies its own keys at te_scale.  The cached
 * empty-prompt conditioning is bypassed while a set touches an encoder. */
struct tsr_lora_set;
void tsr_text_cond_set_lora(tsr_text_cond *c, const struct tsr_lora_set *set);
/* Encoder `which`'s weights (borrowed; NULL when absent), for binding LoRAs. */
const tsr_weights *tsr_text_cond_weights(const tsr_text_cond *c, int which);

/* Textual-inversion embeddings (model/embeddings.h; borrowed until replaced,
 * NULL = none): a name found in a prompt's tokens, longest first, becomes
 * its vectors in each encoder's token-embedding output (A1111's rule,
 * docs/lora.md "Embeddings").  Each embedding must have one part per
 * encoder. */
/* Each encoder's width (dims[0..n), n = 1 or 2); returns n. */
int tsr_text_cond_encoder_dims(const tsr_text_cond *c, int dims[2]);
struct tsr_embedding_db;
int tsr_text_cond_set_embeddings(tsr_text_cond *c, const struct tsr_embedding_db *db);
/* Which embeddings the encode calls since the last reset used, as A1111's
 * "TI hashes" value ("name: hash, ..."; "" when none; as many whole entries
 * as fit in size). */
void tsr_text_cond_reset_used(tsr_text_cond *c);
int tsr_text_cond_used_hashes(const tsr_text_cond *c, char *buf, size_t size);

/* Extend e with empty-prompt windows to n_tokens (a multiple of 77), so a
 * prompt and its negative share one sequence length (as A1111 pads). */
int tsr_text_cond_pad(tsr_text_cond *c, int clip_skip, tsr_text_embedding *e, int n_tokens);

#endif
