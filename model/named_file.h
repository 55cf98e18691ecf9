/*
 * model/named_file.h - a named file inside a configured folder.
 *
 * Why one mechanism: LoRA names (--lora-dir) and textual-inversion
 * embedding names (--embeddings-dir) both come from prompts and request
 * bodies, so both are hostile input that becomes a path.  The rules
 * (model/lora_dir.c) are written once: the name is checked on its own (no
 * '/', '\\', ':', "..", leading '.', control bytes; at most
 * TSR_LORA_NAME_MAX bytes), then the file's real path, links resolved,
 * must lie directly inside the folder's real path.  The kind only words
 * the messages ("lora: ... LoRA folder (--lora-dir)").
 */
#ifndef TSR_MODEL_NAMED_FILE_H
#define TSR_MODEL_NAMED_FILE_H

typedef struct tsr_named_kind {
    const char *tag;    /* message prefix: "lora" */
    const char *what;   /* "LoRA" */
    const char *folder; /* "LoRA folder" */
    const char *flag;   /* "--lora-dir" */
} tsr_named_kind;

extern const tsr_named_kind tsr_named_lora;
extern const tsr_named_kind tsr_named_embedding;

/* The name alone, no file system. */
int tsr_named_check(const tsr_named_kind *k, const char *name);
/* "<dir>/<name>.safetensors" after the checks above; *path owned (free). */
int tsr_named_resolve(const tsr_named_kind *k, const char *dir, const char *name, char **path);
/* Stems of dir's *.safetensors files that pass tsr_named_resolve, sorted.
 * *names owned: tsr_lora_list_free. */
int tsr_named_list(const tsr_named_kind *k, const char *dir, char ***names, int *n);

#endif
