/*
 * image/image_internal.h - helpers shared by the image module's files only.
 *
 * Why a second header: these are implementation details (row conversion with
 * the decoders' 2-channel gray+alpha layout, UTF-8/Latin-1 handling for PNG
 * text, the atomic file write) that no other module should call.
 */
#ifndef TSR_IMAGE_INTERNAL_H
#define TSR_IMAGE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Convert n pixels from sc (1, 2 = gray+alpha, 3, 4) to dc (1, 3, 4)
 * channels; see tsr_image_convert for the rules. */
void tsr_image_convert_row(const uint8_t *src, uint32_t sc, uint8_t *dst, uint32_t dc, size_t n);

/* Strict UTF-8 check (no overlongs, surrogates or code points > U+10FFFF).
 * *max_cp receives the largest code point (0 for empty input). */
bool tsr_utf8_valid(const char *s, size_t len, uint32_t *max_cp);

/* Latin-1 bytes -> UTF-8, NUL-terminated; owned (free()) or NULL on OOM. */
char *tsr_latin1_to_utf8(const char *s, size_t len);

/* Valid UTF-8 whose code points are all <= U+00FF -> Latin-1 bytes,
 * NUL-terminated; owned (free()) or NULL on OOM. */
char *tsr_utf8_to_latin1(const char *s, size_t len);


#endif
