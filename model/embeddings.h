/*
 * model/embeddings.h - textual-inversion embeddings from --embeddings-dir.
 *
 * Why a table of small float arrays loaded all at once: an embedding is used
 * whenever its name appears in a prompt (A1111's rule), so every name must
 * be known before any prompt is tokenized, and the files are tiny (n
 * vectors of the encoder's width: a few KB).  They are read through the
 * validating safetensors reader; pickle files (.pt, .bin, .ckpt) are never
 * opened.  Names resolve through the one mechanism for named files inside a
 * configured folder (model/named_file.h), the one LoRAs use.
 *
 * Formats (docs/lora.md, "Embeddings"):
 *   A1111        {"emb_params": [n, dim]}
 *   SDXL         {"clip_l": [n, 768], "clip_g": [n, 1280]}
 *   diffusers    {"<token>": [dim]} or [n, dim]: any file of one tensor
 * F32, F16 or BF16; 1..75 vectors (one chunk of a prompt holds 75 tokens).
 */
#ifndef TSR_MODEL_EMBEDDINGS_H
#define TSR_MODEL_EMBEDDINGS_H

#include <stddef.h>
#include <stdint.h>

#define TSR_EMB_MAX_VECTORS 75
#define TSR_EMB_MAX_DIM 8192
#define TSR_EMB_MAX_FILE (16u << 20)

typedef struct tsr_ti_embedding {
    char *name;          /* file stem (owned) */
    int n_vectors;
    int n_parts;         /* one per text encoder of the model */
    int dim[2];
    float *vec[2];       /* [n_vectors, dim[i]] (owned) */
    char hash[13];       /* A1111's TI hash: SHA-256 of the file, 12 hex digits */
} tsr_ti_embedding;

/* A file of the folder that did not load: A1111's "skipped". */
typedef struct tsr_embedding_skip {
    char *name;   /* owned */
    int vectors;  /* 0 when unknown */
    int shape;    /* the vectors' width (sum over parts); 0 when unknown */
    char *reason; /* owned: the error */
} tsr_embedding_skip;

typedef struct tsr_embedding_db {
    tsr_ti_embedding *emb; /* sorted by name */
    int n;
    tsr_embedding_skip *skip;
    int n_skip;
} tsr_embedding_db;

/* Read one file for a model whose text encoders take dims[0..n_dims)
 * (1 encoder: a single tensor; 2, SDXL: clip_l and clip_g).  `name` names
 * the embedding in messages (never the path).  On error *out is empty and
 * *vectors / *shape tell what the file held, when that was read. */
int tsr_embedding_load_file(const char *path, const char *name, const int *dims, int n_dims,
                            tsr_ti_embedding *out, int *vectors, int *shape);
/* The same from bytes in memory (the fuzzer's entry; the hash is of the
 * bytes). */
int tsr_embedding_load_memory(const void *data, size_t size, const char *name, const int *dims,
                              int n_dims, tsr_ti_embedding *out, int *vectors, int *shape);
void tsr_ti_embedding_free(tsr_ti_embedding *e);

/* Every *.safetensors in dir (names checked, links kept inside); files that
 * fail are listed in skip with their error, as are pickle files.  dir NULL
 * or "" gives an empty table.  Owned: tsr_embedding_db_free. */
int tsr_embedding_db_load(const char *dir, const int *dims, int n_dims, tsr_embedding_db **out);
void tsr_embedding_db_free(tsr_embedding_db *db);

#endif
