/*
 * fuzz/fuzz_config.c - libFuzzer target for the component config parsers
 * (model/model_config.c) and model_index.json handling.
 *
 * Why: configs are JSON written by strangers and their integers size every
 * later loop over blocks and layers.  The first input byte picks the parser
 * (UNet, VAE, text encoder, model_index); the rest is the document.  Beyond
 * "no crash, no over-read", a config that parses must survive emit -> parse
 * unchanged, since `tessera convert` relies on that round trip.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/json.h"
#include "model/model_config.h"

#define CHECK(c)               \
    do {                       \
        if (!(c))              \
            __builtin_trap();  \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] % 4;
    cJSON *j = NULL, *e = NULL;
    if (tsr_json_parse((const char *)data + 1, size - 1, "fuzz", &j) < 0)
        return 0;
    switch (which) {
    case 0: {
        tsr_unet_desc a, b;
        if (tsr_unet_desc_parse(j, "fuzz", &a) == 0 && tsr_unet_desc_emit(&a, &e) == 0) {
            CHECK(tsr_unet_desc_parse(e, "emitted", &b) == 0);
            CHECK(a.n_blocks == b.n_blocks && a.layers_per_block == b.layers_per_block);
            CHECK(memcmp(a.block_out_channels, b.block_out_channels, sizeof a.block_out_channels) == 0);
            CHECK(memcmp(a.heads, b.heads, sizeof a.heads) == 0);
            CHECK(a.text_time == b.text_time && a.in_channels == b.in_channels);
        }
        break;
    }
    case 1: {
        tsr_vae_desc a, b;
        if (tsr_vae_desc_parse(j, "fuzz", &a) == 0 && tsr_vae_desc_emit(&a, &e) == 0) {
            CHECK(tsr_vae_desc_parse(e, "emitted", &b) == 0);
            CHECK(a.n_blocks == b.n_blocks && a.latent_channels == b.latent_channels);
        }
        break;
    }
    case 2: {
        tsr_textenc_desc a, b;
        if (tsr_textenc_desc_parse(j, "fuzz", &a) == 0 && tsr_textenc_desc_emit(&a, &e) == 0) {
            CHECK(tsr_textenc_desc_parse(e, "emitted", &b) == 0);
            CHECK(a.num_hidden_layers == b.num_hidden_layers && a.hidden_size == b.hidden_size);
            CHECK(a.with_projection == b.with_projection);
        }
        break;
    }
    default: {
        /* model_index.json: the checks tsr_model_open makes before touching
         * the file system */
        if (tsr_json_expect_object(j, "fuzz", "an object") == 0 &&
            tsr_json_check_unique_keys(j, "fuzz") == 0) {
            static const char *const comps[] = {"unet", "vae", "text_encoder", "text_encoder_2",
                                                "scheduler", "tokenizer"};
            for (size_t i = 0; i < sizeof comps / sizeof comps[0]; i++) {
                const cJSON *v = tsr_json_member(j, comps[i]);
                const char *names[2];
                int n = 0;
                (void)tsr_json_get_string_array(j, "fuzz", comps[i], names, 2, &n);
                (void)v;
            }
        }
        break;
    }
    }
    cJSON_Delete(e);
    cJSON_Delete(j);
    return 0;
}
