/*
 * tests/service/test_comfy.h - what test_comfy.c shares with
 * test_comfy_chains.c (one executable, unit_comfy): the patched default
 * workflow, its compile, and the bad-case check.
 */
#ifndef TEST_COMFY_H
#define TEST_COMFY_H

#include "comfy.h"

typedef struct bad_case {
    const char *name;
    const char *patch;       /* NULL: see `raw` */
    const char *raw;         /* the whole prompt, when not a patch */
    const char *type;        /* the top-level error type */
    const char *node;        /* a node that must be in node_errors (NULL: none checked) */
    const char *node_type;   /* an error type that node must carry */
} bad_case;

#define NODE_FAILED "prompt_outputs_failed_validation"

/* ComfyUI's default txt2img workflow with a patch applied (owned). */
cJSON *patched(const char *patch);
/* comfy_compile with the test's context (checkpoint "demo", LoRAs a and b,
 * images "in.png" (a stand-in) and "real.png" (a real 20x12 PNG)). */
int compile_it(const cJSON *w, comfy_plan *plan, cJSON **err);
/* 0 when the case is refused as it says (else a failure printed). */
int check_bad(const bad_case *c);
/* A patch of the base compiled; the first job's JSON text (owned), NULL
 * (with the error printed) when it did not compile. */
char *job_text(const char *patch, comfy_plan *plan);

int test_two_chains(void);
int test_scaled_output(void);
int test_img2img_scaled(void);

#endif
