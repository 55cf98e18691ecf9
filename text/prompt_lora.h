/*
 * text/prompt_lora.h - A1111's <lora:...> tags in a prompt.
 *
 * Why apart from text/prompt.c: the tags are not text to encode but a
 * request for LoRAs, taken out of the prompt before it reaches the
 * attention-syntax parser, as A1111's extra-networks pass does.
 */
#ifndef TSR_TEXT_PROMPT_LORA_H
#define TSR_TEXT_PROMPT_LORA_H

#include <stdbool.h>

#define TSR_PROMPT_LORA_NAME_MAX 128

typedef struct tsr_prompt_lora {
    char name[TSR_PROMPT_LORA_NAME_MAX + 1];
    double te, unet; /* multipliers */
} tsr_prompt_lora;

/* Find <lora:NAME[:TE[:UNET]]> and <lyco:...> tags, with named te=/unet=
 * items as A1111 takes them (TE defaults to 1, UNET to TE), and write the
 * prompt without them to *stripped (owned; malloc).  Up to `max` tags go
 * to out[0..*n); more fail with TSR_ERR_RANGE; a bad number, an empty or
 * overlong name fails with TSR_ERR_INVALID naming the tag. */
int tsr_prompt_take_loras(const char *prompt, char **stripped, tsr_prompt_lora *out, int max,
                          int *n);

#endif
