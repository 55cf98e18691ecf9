/*
 * pipeline/lora.h - LoRAs in the pipeline: the engine's cache, an image's
 * set, and the rows of a UNet call.
 *
 * Why apart from engine.c and batch_image.c: LoRA handling touches every
 * phase of an image (submit: the names; prepare: loading and holding, the
 * text encoders; each step: the rows; free: the holds), and keeping it in
 * one file keeps those phases' own files about their own work.
 */
#ifndef TSR_PIPELINE_LORA_H
#define TSR_PIPELINE_LORA_H

#include "model/lora.h"
#include "tessera.h"

struct tsr_engine;
typedef struct tsr_image_lora tsr_image_lora;

/* Engine open/close: the module tables and the cache (o->lora_dir may be
 * NULL: then every LoRA asked for fails naming --lora-dir). */
int tsr_engine_lora_open(struct tsr_engine *e, const tsr_engine_options *o);
void tsr_engine_lora_close(struct tsr_engine *e);

/* The LoRAs of p (p->loras and the prompt's tags): checked names, each
 * resolving to a file in the folder.  field gets "loras" or "prompt". */
int tsr_image_lora_check(const struct tsr_engine *e, const tsr_image_params *p,
                         const char **field);
/* Collect at submit: *out NULL when the image has none.  Owned. */
int tsr_image_lora_create(const struct tsr_engine *e, const tsr_image_params *p,
                          tsr_image_lora **out);
/* Release the holds and free. */
void tsr_image_lora_free(tsr_image_lora *l);
/* The prompt to encode (tags removed). */
const char *tsr_image_lora_prompt(const tsr_image_lora *l);
/* Prepare phase: load (or find) and hold every LoRA. */
int tsr_image_lora_acquire(struct tsr_engine *e, tsr_image_lora *l);
/* The held set (NULL when none or before acquire). */
const tsr_lora_set *tsr_image_lora_set(const tsr_image_lora *l);
/* A1111's "Lora hashes" value ("name: hash, name: hash"); "" when none. */
const char *tsr_image_lora_hashes(const tsr_image_lora *l);

#endif
