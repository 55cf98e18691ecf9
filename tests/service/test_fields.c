/*
 * tests/service/test_fields.c - the typed field reader's coercion table
 * (service/api/fields.c, k_coercions), case by case.
 *
 * Why a C unit test: the table is the one statement of which A1111 values
 * pydantic would take (false for an integer, 3.0 for 3, "7.5" for a number,
 * 0/1 for a boolean), and the strict dialects (native, OpenAI) must not see
 * any of it.  Each row below is a body member, a reader, the rules, and
 * what must come out, so a new coercion is one line here and one row there;
 * the HTTP side of the same rules is in tests/compat/test_a1111_api.py.
 * The image-as-text reader (base64 or a base64 data URL) is tested here too.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fields.h"
#include "json.h"
#include "test.h"

typedef struct {
    const char *json;  /* the value of member "v" */
    char reader;       /* 'b' bool, 'i' int [0, 100], 'n' number */
    svc_coerce rules;
    bool ok;           /* read without a refusal */
    double want;       /* the value read (1/0 for a boolean); with ok */
} coercion_case;

static const coercion_case k_cases[] = {
    /* booleans: 0/1 integers under PYDANTIC only */
    {"true", 'b', SVC_COERCE_STRICT, true, 1},
    {"0", 'b', SVC_COERCE_STRICT, false, 0},
    {"0", 'b', SVC_COERCE_PYDANTIC, true, 0},
    {"1", 'b', SVC_COERCE_PYDANTIC, true, 1},
    {"2", 'b', SVC_COERCE_PYDANTIC, false, 0},
    {"1.0", 'b', SVC_COERCE_PYDANTIC, false, 0},
    {"\"yes\"", 'b', SVC_COERCE_PYDANTIC, false, 0},
    /* integers: false/true, integral floats, integer strings */
    {"false", 'i', SVC_COERCE_STRICT, false, 0},
    {"false", 'i', SVC_COERCE_PYDANTIC, true, 0},
    {"true", 'i', SVC_COERCE_PYDANTIC, true, 1},
    {"3.0", 'i', SVC_COERCE_STRICT, false, 0},
    {"3.0", 'i', SVC_COERCE_PYDANTIC, true, 3},
    {"1e1", 'i', SVC_COERCE_PYDANTIC, true, 10},
    {"3.5", 'i', SVC_COERCE_PYDANTIC, false, 0},
    {"\"3\"", 'i', SVC_COERCE_STRICT, false, 0},
    {"\"3\"", 'i', SVC_COERCE_PYDANTIC, true, 3},
    {"\"3.0\"", 'i', SVC_COERCE_PYDANTIC, false, 0},
    {"\"0x10\"", 'i', SVC_COERCE_PYDANTIC, false, 0},
    {"200.0", 'i', SVC_COERCE_PYDANTIC, false, 0}, /* out of [0, 100] after coercion */
    {"[]", 'i', SVC_COERCE_PYDANTIC, false, 0},
    /* numbers: numeric strings */
    {"7.5", 'n', SVC_COERCE_STRICT, true, 7.5},
    {"\"7.5\"", 'n', SVC_COERCE_STRICT, false, 0},
    {"\"7.5\"", 'n', SVC_COERCE_PYDANTIC, true, 7.5},
    {"\"-2e1\"", 'n', SVC_COERCE_PYDANTIC, true, -20},
    {"\"nan\"", 'n', SVC_COERCE_PYDANTIC, false, 0},
    {"\"inf\"", 'n', SVC_COERCE_PYDANTIC, false, 0},
    {"\" 7\"", 'n', SVC_COERCE_PYDANTIC, false, 0},
    {"\"\"", 'n', SVC_COERCE_PYDANTIC, false, 0},
    {"\"1e999\"", 'n', SVC_COERCE_PYDANTIC, false, 0},
    {"true", 'n', SVC_COERCE_PYDANTIC, false, 0},
    /* null is "use the default" for every dialect */
    {"null", 'i', SVC_COERCE_STRICT, true, 42},
    {"null", 'n', SVC_COERCE_PYDANTIC, true, 42},
    {"null", 'b', SVC_COERCE_PYDANTIC, true, 1},
};

static int run_case(const coercion_case *c)
{
    char body[128], why[128];
    snprintf(body, sizeof body, "{\"v\":%s}", c->json);
    cJSON *o = svc_json_parse(body, strlen(body), why, sizeof why);
    if (!o)
        TSR_FAIL("%s: not parsed: %s", body, why);
    svc_fields f;
    svc_fields_init(&f, o, NULL, false);
    f.coerce = c->rules;
    int rc = -1;
    double got = 0;
    if (c->reader == 'b') {
        bool b = false;
        rc = svc_fields_bool(&f, "v", false, true, &b);
        got = b;
    } else if (c->reader == 'i') {
        long long i = 0;
        rc = svc_fields_int(&f, "v", 0, 100, 42, &i);
        got = (double)i;
    } else {
        rc = svc_fields_number(&f, "v", -HUGE_VAL, HUGE_VAL, false, 42, &got, NULL);
    }
    cJSON_Delete(o);
    const char *rules = c->rules == SVC_COERCE_PYDANTIC ? "pydantic" : "strict";
    if (c->ok && rc != 0)
        TSR_FAIL("%s (%c, %s): refused: %s", body, c->reader, rules, f.message);
    if (!c->ok && rc == 0)
        TSR_FAIL("%s (%c, %s): taken as %g, should be refused", body, c->reader, rules, got);
    if (c->ok && got != c->want)
        TSR_FAIL("%s (%c, %s): %g, want %g", body, c->reader, rules, got, c->want);
    /* a refusal names the member */
    if (!c->ok && (strcmp(f.field, "v") != 0 || strncmp(f.message, "v must be", 9) != 0))
        TSR_FAIL("%s: refusal \"%s\" (field \"%s\") does not name v", body, f.message, f.field);
    return 0;
}

static int test_coercion_table(void)
{
    int bad = 0;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
        bad += run_case(&k_cases[i]);
    printf("%zu coercion cases, %d failed\n", sizeof k_cases / sizeof k_cases[0], bad);
    return bad ? 1 : 0;
}

static int test_coerce_direct(void)
{
    double v = -1;
    cJSON *t = cJSON_CreateTrue();
    ASSERT_TRUE(!svc_fields_coerce(SVC_COERCE_STRICT, 'i', t, &v));
    ASSERT_TRUE(svc_fields_coerce(SVC_COERCE_PYDANTIC, 'i', t, &v) && v == 1);
    ASSERT_TRUE(!svc_fields_coerce(SVC_COERCE_PYDANTIC, 'n', t, &v));
    cJSON_Delete(t);
    /* seeds: "5" and 5.0 are 5 under PYDANTIC, refused STRICT; "-1" random */
    const char *seeds[] = {"{\"s\":\"5\"}", "{\"s\":5.0}", "{\"s\":\"-1\"}"};
    for (int i = 0; i < 3; i++) {
        char why[64];
        cJSON *o = svc_json_parse(seeds[i], strlen(seeds[i]), why, sizeof why);
        ASSERT_TRUE(o != NULL);
        for (int rules = 0; rules < 2; rules++) {
            svc_fields f;
            svc_fields_init(&f, o, NULL, false);
            f.coerce = rules ? SVC_COERCE_PYDANTIC : SVC_COERCE_STRICT;
            uint64_t seed = 0;
            bool random = false;
            int rc = svc_fields_seed(&f, "s", false, "a seed", &seed, &random);
            ASSERT_EQ(rc, rules ? 0 : -1);
            if (rules)
                ASSERT_TRUE(i == 2 ? random : (!random && seed == 5));
        }
        cJSON_Delete(o);
    }
    return 0;
}

/* svc_fields_base64, the one reader of images sent as text: native
 * init_image/mask and A1111's init_images/mask/extras went through three
 * copies, and A1111's two had drifted: they read "data:image/png,<base64>"
 * (a data URL that does not say base64) as base64 where the native one
 * refused it. */
static int test_base64(void)
{
    static const struct {
        const char *in;
        const char *want; /* the bytes, or NULL: refused with `why` in the message */
        const char *why;
    } cases[] = {
        {"aGk=", "hi", NULL},
        {"data:image/png;base64,aGk=", "hi", NULL},
        {"data:;base64,aGk=", "hi", NULL},
        {"data:image/png,aGk=", NULL, "img: only base64 data URLs are accepted"},
        {"data:image/png;charset=x,aGk=", NULL, "img: only base64 data URLs are accepted"},
        {"data:image/png;base64aGk=", NULL, "img: a data URL needs a ','"},
        {"", NULL, "img is empty"},
        {"data:image/png;base64,", NULL, "img is empty"},
        {"a!Gk", NULL, "img is not valid base64: invalid base64 character"},
        {"a", NULL, "img is not valid base64: truncated"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *out = (uint8_t *)"sentinel";
        size_t len = 99;
        char err[160] = "";
        int rc = svc_fields_base64("img", cases[i].in, &out, &len, err, sizeof err);
        if (cases[i].want) {
            if (rc != 0 || len != strlen(cases[i].want) || memcmp(out, cases[i].want, len) != 0)
                TSR_FAIL("\"%s\": rc %d, %zu bytes (%s)", cases[i].in, rc, len, err);
            free(out);
        } else {
            if (rc != -1 || out != NULL || !strstr(err, cases[i].why))
                TSR_FAIL("\"%s\": rc %d, message \"%s\", wanted \"%s\"", cases[i].in, rc, err,
                         cases[i].why);
        }
    }
    return 0;
}

static const tsr_test_entry tests[] = {
    {"coercion_table", test_coercion_table},
    {"coerce_direct", test_coerce_direct},
    {"base64", test_base64},
};

TSR_TEST_TABLE_MAIN(tests)
