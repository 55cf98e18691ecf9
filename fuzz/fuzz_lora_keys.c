/*
 * fuzz/fuzz_lora_keys.c - libFuzzer driver for LoRA key mapping, the
 * prompt's <lora:...> tags and LoRA name checks (model/lora.h,
 * text/prompt_lora.h).
 *
 * Why these three: all of them read text a user controls (a file's keys, a
 * prompt, a request's names) and turn it into a module lookup or a path.
 * The first byte picks the parser; the rest is its input.  Invariants are
 * checked, not just crashes: a parsed key's module fits its buffer and
 * maps only to a "<module>.weight" of the table, a stripped prompt is never
 * longer than the prompt, and a name that passes the check has no
 * separator and no "..".
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/lora.h"
#include "text/prompt_lora.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[] = {
    "down_blocks.0.attentions.0.proj_in.weight",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0.weight",
    "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj.weight",
    "down_blocks.0.resnets.0.conv1.weight",
    "down_blocks.0.resnets.0.time_emb_proj.weight",
    "mid_block.attentions.0.transformer_blocks.0.attn2.to_k.weight",
    "up_blocks.1.resnets.2.conv_shortcut.weight",
    "text_model.encoder.layers.0.self_attn.q_proj.weight",
    "text_model.encoder.layers.11.mlp.fc2.weight",
    "text_model.encoder.layers.0.self_attn.q_proj.bias",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tsr_lora_names *table;
    if (!table && tsr_lora_names_build(names, sizeof names / sizeof names[0], NULL, &table) < 0)
        return 0;
    if (size < 1 || size > 4096)
        return 0;
    char *s = malloc(size);
    if (!s)
        return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    switch (data[0] % 3) {
    case 0: {
        tsr_lora_key k;
        if (tsr_lora_parse_key(s, &k) == 0) {
            if (strlen(k.module) >= sizeof k.module || k.comp < 0 || k.comp >= TSR_COMP_COUNT)
                __builtin_trap();
            const char *w = tsr_lora_names_find(table, &k);
            if (w) {
                const size_t n = strlen(w);
                if (n < 7 || strcmp(w + n - 7, ".weight") != 0)
                    __builtin_trap();
            }
        }
        break;
    }
    case 1: {
        tsr_prompt_lora out[4];
        char *stripped = NULL;
        int n = 0;
        if (tsr_prompt_take_loras(s, &stripped, out, 4, &n) == 0) {
            if (!stripped || strlen(stripped) > strlen(s) || n < 0 || n > 4)
                __builtin_trap();
            for (int i = 0; i < n; i++)
                if (!out[i].name[0] || strchr(out[i].name, '>'))
                    __builtin_trap();
        }
        free(stripped);
        break;
    }
    default:
        if (tsr_lora_check_name(s) == 0 &&
            (strchr(s, '/') || strchr(s, '\\') || strstr(s, "..") || s[0] == '.' || !s[0]))
            __builtin_trap();
        break;
    }
    free(s);
    return 0;
}
