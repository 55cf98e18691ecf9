/*
 * pipeline/embeddings.h - textual-inversion embeddings over an engine's
 * life: the folder read at open and again when it changes, the names handed
 * to the text conditioner, and which of them an image used (its infotext's
 * "TI hashes").  Apart from engine.c for the same reason as pipeline/lora.h:
 * the phases' own files stay about their own work.
 */
#ifndef TSR_PIPELINE_EMBEDDINGS_H
#define TSR_PIPELINE_EMBEDDINGS_H

#include "tessera.h"

struct tsr_engine;
typedef struct tsr_engine_emb tsr_engine_emb;

/* After the conditioner opened: reads o->embeddings_dir (NULL: none). */
int tsr_engine_emb_open(struct tsr_engine *e, const tsr_engine_options *o);
void tsr_engine_emb_close(struct tsr_engine *e);
/* Prepare phase, before encoding: reload when the folder's mtime moved. */
int tsr_engine_emb_refresh(struct tsr_engine *e);
/* Around an image's encodes: forget, then name what was used. */
void tsr_engine_emb_begin(struct tsr_engine *e);
const char *tsr_engine_emb_hashes(struct tsr_engine *e); /* borrowed until the next call */

#endif
