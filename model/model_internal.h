/*
 * model/model_internal.h - the tsr_model struct, shared by model/model.c
 * (common code and diffusers folders) and model/model_single.c (single-file
 * LDM checkpoints).  Not a public header: only those two files and
 * model/weights.c include it.
 *
 * A model is an index: per component, a sorted array of (internal name,
 * source file, entry) triples.  Entries are copies of the reader's entries,
 * possibly adjusted (a q/k/v row slice of a fused OpenCLIP projection is the
 * same bytes at a later offset with a third of the rows; a 1x1 conv viewed
 * as a linear drops two unit dims), so data is always tsr_st_data(file,
 * entry) and no weight is copied at open time - except the few transposed
 * ones (OpenCLIP text_projection), which live in a small in-memory
 * safetensors image the model owns.
 */
#ifndef TSR_CORE_MODEL_INTERNAL_H
#define TSR_CORE_MODEL_INTERNAL_H

#include "model/model.h"
#include "model/model_config.h"

#include <cJSON.h>

typedef struct tsr_tensor_ref {
    char *name;                  /* owned, internal name */
    const tsr_safetensors *file; /* borrowed from the model's files */
    tsr_st_entry entry;          /* adjusted copy; entry.name borrowed from the file */
} tsr_tensor_ref;

typedef struct tsr_model_component {
    bool present;
    cJSON *config; /* owned */
    tsr_unet_desc unet;
    tsr_vae_desc vae;
    tsr_textenc_desc clip;
    tsr_tensor_ref *tensors; /* owned, sorted by name */
    size_t n, cap;
} tsr_model_component;

struct tsr_model {
    char *path; /* owned */
    tsr_model_layout layout;
    tsr_family family;
    tsr_prediction prediction;
    bool prediction_assumed;
    bool inpainting, refiner;
    tsr_model_component comp[TSR_COMP_COUNT];
    tsr_safetensors **files; /* owned */
    size_t n_files, cap_files;
    void *mem_image; /* owned: bytes of the in-memory safetensors of transposed tensors */
    cJSON *index, *scheduler; /* owned */
    char *tokenizer_dir[2];   /* owned */
    char *tmp_dir;            /* owned: single files' metadata tokenizers, removed at close */
    char **unrecognised;      /* owned, sorted */
    size_t n_unrec, cap_unrec;
    size_t n_ignored; /* single files: known keys deliberately dropped */
};

/* model.c */
int tsr_model_add_file(tsr_model *m, tsr_safetensors *st); /* takes ownership */
int tsr_model_add_tensor(tsr_model *m, tsr_component c, const char *name,
                         const tsr_safetensors *file, const tsr_st_entry *entry);
int tsr_model_add_unrecognised(tsr_model *m, const char *key);
/* Sort each component's tensors; fail on a duplicate internal name. */
int tsr_model_finish_index(tsr_model *m);
int tsr_model_parse_component_config(tsr_model *m, tsr_component c, const char *label);

/* model_single.c */
int tsr_model_open_single(tsr_model *m, const char *path);
/* Remove the temporary tokenizer folder of a single file (if any). */
void tsr_model_remove_tmp(tsr_model *m);


#endif
