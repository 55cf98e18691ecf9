/*
 * text/prompt.c - A1111's parse_prompt_attention and tokenize_line.
 *
 * Why a direct transcription: compatibility is the feature.  The parser
 * walks the text with the same alternation as A1111's re_attention (in the
 * same order), keeps the same bracket stacks and multiplies the same doubles
 * in the same order, so weights are bit-identical to Python's floats before
 * the final conversion to float.  Unicode classes (\s, \d, \w for \b) come
 * from CPython's `re` via text/unicode_tables.c.
 */
#include "text/prompt.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/unicode.h"

typedef struct seg_vec {
    tsr_u32buf *text; /* owned array of owned buffers */
    double *w;
    size_t n, cap;
} seg_vec;

static void seg_vec_free(seg_vec *v)
{
    for (size_t i = 0; i < v->n; i++)
        tsr_u32_free(&v->text[i]);
    free(v->text);
    free(v->w);
    *v = (seg_vec){0};
}

static int seg_push(seg_vec *v, const uint32_t *s, size_t n, double w)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        tsr_u32buf *t = realloc(v->text, cap * sizeof *t);
        if (!t)
            return tsr_errorf(TSR_ERR_NOMEM, "prompt: out of memory");
        v->text = t;
        double *ww = realloc(v->w, cap * sizeof *ww);
        if (!ww)
            return tsr_errorf(TSR_ERR_NOMEM, "prompt: out of memory");
        v->w = ww;
        v->cap = cap;
    }
    tsr_u32buf b = {0};
    for (size_t i = 0; i < n; i++) {
        int rc = tsr_u32_push(&b, s[i]);
        if (rc < 0) {
            tsr_u32_free(&b);
            return rc;
        }
    }
    v->text[v->n] = b;
    v->w[v->n++] = w;
    return 0;
}

static bool re_space(uint32_t c)
{
    return tsr_u_in(tsr_u_re_space, tsr_u_re_space_n, c);
}

static bool re_word(uint32_t c)
{
    return tsr_u_in(tsr_u_re_word, tsr_u_re_word_n, c);
}

static int re_digit(uint32_t c)
{
    return (int)tsr_u_vlookup(tsr_u_re_digit, tsr_u_re_digit_n, c) - 1;
}

static bool is_break_at(const uint32_t *s, size_t n, size_t p)
{
    static const char kw[] = "BREAK";
    if (n - p < 5)
        return false;
    for (int k = 0; k < 5; k++)
        if (s[p + (size_t)k] != (uint32_t)kw[k])
            return false;
    return (p == 0 || !re_word(s[p - 1])) && (p + 5 == n || !re_word(s[p + 5]));
}

/* re.split(r"\s*\bBREAK\b\s*", text) appended as A1111 does. */
static int push_text(seg_vec *v, const uint32_t *s, size_t n)
{
    size_t piece = 0, i = 0;
    while (i < n) {
        /* leftmost match: a whitespace run (possibly empty) then BREAK */
        size_t j = i;
        while (j < n && re_space(s[j]))
            j++;
        if (!is_break_at(s, n, j)) {
            i = j > i ? j : i + 1;
            continue;
        }
        size_t end = j + 5;
        while (end < n && re_space(s[end]))
            end++;
        TSR_TRY(seg_push(v, s + piece, i - piece, 1.0));
        static const uint32_t brk[5] = {'B', 'R', 'E', 'A', 'K'};
        TSR_TRY(seg_push(v, brk, 5, -1.0));
        piece = i = end;
    }
    return seg_push(v, s + piece, n - piece, 1.0);
}

static void multiply_range(seg_vec *v, size_t start, double m)
{
    for (size_t p = start; p < v->n; p++)
        v->w[p] *= m;
}

/* ":" \s* ([+-]?[.\d]+) \s* ")" at s[i]; returns the match end or 0. */
static size_t weight_match(const uint32_t *s, size_t n, size_t i, size_t *ws, size_t *we)
{
    size_t j = i + 1;
    while (j < n && re_space(s[j]))
        j++;
    *ws = j;
    if (j < n && (s[j] == '+' || s[j] == '-'))
        j++;
    size_t d = j;
    while (j < n && (s[j] == '.' || re_digit(s[j]) >= 0))
        j++;
    if (j == d)
        return 0;
    *we = j;
    while (j < n && re_space(s[j]))
        j++;
    if (j >= n || s[j] != ')')
        return 0;
    return j + 1;
}

/* Python float() of a [+-]?[.\d]+ string. */
static int parse_weight(const uint32_t *s, size_t n, double *out)
{
    char *buf = malloc(n + 1);
    if (!buf)
        return tsr_errorf(TSR_ERR_NOMEM, "prompt: out of memory");
    size_t digits = 0, dots = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = s[i];
        if (c == '+' || c == '-' || c == '.') {
            buf[i] = (char)c;
            dots += c == '.';
        } else {
            buf[i] = (char)('0' + re_digit(c));
            digits++;
        }
    }
    buf[n] = '\0';
    int rc = 0;
    if (digits == 0 || dots > 1)
        rc = tsr_errorf(TSR_ERR_INVALID,
                        "prompt: emphasis weight \"%.40s\" is not a number (A1111 fails on it too)",
                        buf);
    else
        *out = strtod(buf, NULL);
    free(buf);
    return rc;
}

typedef struct stack {
    size_t *v;
    size_t n, cap;
} stack;

static int stack_push(stack *s, size_t x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        size_t *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return tsr_errorf(TSR_ERR_NOMEM, "prompt: out of memory");
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return 0;
}

static int parse_cps(const uint32_t *s, size_t n, seg_vec *res)
{
    stack round = {0}, square = {0};
    int rc = 0;
    size_t i = 0;
    while (i < n) {
        uint32_t c = s[i];
        size_t ws, we, end;
        if (c == '\\') {
            /* \( \) \[ \] \\ keep the second character; a lone \ vanishes */
            if (i + 1 < n && (s[i + 1] == '(' || s[i + 1] == ')' || s[i + 1] == '[' ||
                              s[i + 1] == ']' || s[i + 1] == '\\')) {
                TSR_CHECK_GOTO(rc, seg_push(res, s + i + 1, 1, 1.0), cleanup);
                i += 2;
            } else {
                TSR_CHECK_GOTO(rc, seg_push(res, s, 0, 1.0), cleanup);
                i++;
            }
        } else if (c == '(') {
            TSR_CHECK_GOTO(rc, stack_push(&round, res->n), cleanup);
            i++;
        } else if (c == '[') {
            TSR_CHECK_GOTO(rc, stack_push(&square, res->n), cleanup);
            i++;
        } else if (c == ':' && (end = weight_match(s, n, i, &ws, &we)) > 0) {
            if (round.n) {
                double w = 1.0;
                TSR_CHECK_GOTO(rc, parse_weight(s + ws, we - ws, &w), cleanup);
                multiply_range(res, round.v[--round.n], w);
            } else {
                TSR_CHECK_GOTO(rc, push_text(res, s + i, end - i), cleanup);
            }
            i = end;
        } else if (c == ')' || c == ']') {
            stack *st = c == ')' ? &round : &square;
            if (st->n)
                multiply_range(res, st->v[--st->n], c == ')' ? 1.1 : 1 / 1.1);
            else
                TSR_CHECK_GOTO(rc, push_text(res, s + i, 1), cleanup);
            i++;
        } else if (c == ':') {
            TSR_CHECK_GOTO(rc, push_text(res, s + i, 1), cleanup);
            i++;
        } else {
            size_t j = i;
            while (j < n && s[j] != '\\' && s[j] != '(' && s[j] != ')' && s[j] != '[' &&
                   s[j] != ']' && s[j] != ':')
                j++;
            TSR_CHECK_GOTO(rc, push_text(res, s + i, j - i), cleanup);
            i = j;
        }
    }
    for (size_t k = 0; k < round.n; k++)
        multiply_range(res, round.v[k], 1.1);
    for (size_t k = 0; k < square.n; k++)
        multiply_range(res, square.v[k], 1 / 1.1);
    if (res->n == 0)
        TSR_CHECK_GOTO(rc, seg_push(res, s, 0, 1.0), cleanup);
    /* merge runs of identical weights */
    size_t w = 0;
    for (size_t k = 1; k < res->n; k++) {
        if (res->w[k] == res->w[w]) {
            for (size_t t = 0; t < res->text[k].n; t++)
                TSR_CHECK_GOTO(rc, tsr_u32_push(&res->text[w], res->text[k].v[t]), cleanup);
            tsr_u32_free(&res->text[k]);
        } else {
            w++;
            res->text[w] = res->text[k];
            res->w[w] = res->w[k];
            if (w != k)
                res->text[k] = (tsr_u32buf){0};
        }
    }
    if (res->n)
        res->n = w + 1;
cleanup:
    free(round.v);
    free(square.v);
    return rc;
}

static char *to_utf8(const tsr_u32buf *b)
{
    char *s = malloc(b->n * 4 + 1);
    if (!s)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < b->n; i++)
        k += (size_t)tsr_utf8_put(b->v[i], s + k);
    s[k] = '\0';
    return s;
}

void tsr_prompt_parsed_free(tsr_prompt_parsed *p)
{
    for (size_t i = 0; p->seg && i < p->n; i++)
        free(p->seg[i].text);
    free(p->seg);
    p->seg = NULL;
    p->n = 0;
}

int tsr_prompt_parse(const char *prompt, size_t len, tsr_prompt_parsed *out)
{
    *out = (tsr_prompt_parsed){0};
    if (len > TSR_TOKENIZER_MAX_INPUT)
        return tsr_errorf(TSR_ERR_RANGE, "prompt: %zu bytes is over the %u byte limit", len,
                          TSR_TOKENIZER_MAX_INPUT);
    tsr_u32buf cps = {0};
    seg_vec v = {0};
    int rc = 0;
    TSR_CHECK_GOTO(rc, tsr_utf8_decode(prompt, len, &cps, "prompt"), cleanup);
    TSR_CHECK_GOTO(rc, parse_cps(cps.v, cps.n, &v), cleanup);
    out->seg = calloc(v.n ? v.n : 1, sizeof *out->seg);
    if (!out->seg) {
        rc = tsr_errorf(TSR_ERR_NOMEM, "prompt: out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < v.n; i++) {
        out->seg[i].text = to_utf8(&v.text[i]);
        out->seg[i].weight = v.w[i];
        out->n = i + 1;
        if (!out->seg[i].text) {
            rc = tsr_errorf(TSR_ERR_NOMEM, "prompt: out of memory");
            goto cleanup;
        }
    }
cleanup:
    if (rc < 0)
        tsr_prompt_parsed_free(out);
    tsr_u32_free(&cps);
    seg_vec_free(&v);
    return rc;
}

void tsr_prompt_options_init(tsr_prompt_options *o)
{
    o->emphasis = true;
    o->comma_backtrack = 20;
    o->max_chunks = 0;
    o->embeddings = NULL;
    o->n_embeddings = 0;
}

void tsr_prompt_tokens_free(tsr_prompt_tokens *t)
{
    free(t->ids);
    free(t->weights);
    free(t->fix);
    *t = (tsr_prompt_tokens){0};
}

/* Chunk state for tokenize_line. */
typedef struct chunker {
    const tsr_tokenizer *tok;
    const tsr_prompt_options *opt;
    tsr_prompt_tokens *out;
    int32_t cur[TSR_CLIP_CHUNK];
    float curw[TSR_CLIP_CHUNK];
    int32_t curf[TSR_CLIP_CHUNK];
    int n;
    int last_comma;
} chunker;

static int emit_window(tsr_prompt_tokens *out, const tsr_tokenizer *tok, const int32_t *ids,
                       const float *w, const int32_t *f, int n, int max_chunks)
{
    if (max_chunks > 0 && out->n_chunks >= max_chunks)
        return tsr_errorf(TSR_ERR_RANGE, "prompt: more than %d chunks of 75 tokens", max_chunks);
    size_t k = (size_t)out->n_chunks + 1;
    int32_t *ids2 = realloc(out->ids, k * TSR_CLIP_MAX_LENGTH * sizeof(int32_t));
    if (!ids2)
        return tsr_errorf(TSR_ERR_NOMEM, "prompt: out of memory");
    out->ids = ids2;
    float *w2 = realloc(out->weights, k * TSR_CLIP_MAX_LENGTH * sizeof(float));
    if (!w2)
        return tsr_errorf(TSR_ERR_NOMEM, "prompt: out of memory");
    out->weights = w2;
    int32_t *f2 = realloc(out->fix, k * TSR_CLIP_MAX_LENGTH * sizeof(int32_t));
    if (!f2)
        return tsr_errorf(TSR_ERR_NOMEM, "prompt: out of memory");
    out->fix = f2;
    int32_t *df = out->fix + (k - 1) * TSR_CLIP_MAX_LENGTH;
    for (int i = 0; i < TSR_CLIP_MAX_LENGTH; i++)
        df[i] = -1;
    for (int i = 0; i < n; i++)
        df[1 + i] = f[i];
    int32_t *di = out->ids + (k - 1) * TSR_CLIP_MAX_LENGTH;
    float *dw = out->weights + (k - 1) * TSR_CLIP_MAX_LENGTH;
    int32_t pad = tsr_tokenizer_pad(tok);
    di[0] = tsr_tokenizer_bos(tok);
    dw[0] = 1.0f;
    for (int i = 0; i < n; i++)
        di[1 + i] = ids[i], dw[1 + i] = w[i];
    di[n + 1] = tsr_tokenizer_eos(tok);
    dw[n + 1] = 1.0f;
    for (int i = n + 2; i < TSR_CLIP_MAX_LENGTH; i++)
        di[i] = pad, dw[i] = 1.0f;
    out->n_chunks = (int)k;
    return 0;
}

static int next_chunk(chunker *c)
{
    TSR_TRY(emit_window(c->out, c->tok, c->cur, c->curw, c->curf, c->n, c->opt->max_chunks));
    c->n = 0;
    c->last_comma = -1;
    return 0;
}

/* A1111's find_embedding_at_position: the first embedding, longest name
 * first, whose tokens start at ids[p]; returns it or NULL. */
static const tsr_prompt_embedding *find_embedding(const tsr_prompt_options *o, const tsr_ids *ids,
                                                  size_t p, int *index)
{
    for (int i = 0; i < o->n_embeddings; i++) {
        const tsr_prompt_embedding *e = &o->embeddings[i];
        if (e->n_ids < 1 || (size_t)e->n_ids > ids->n - p)
            continue;
        if (memcmp(ids->v + p, e->ids, (size_t)e->n_ids * sizeof(int32_t)) == 0) {
            *index = i;
            return e;
        }
    }
    return NULL;
}

static int chunk_tokens(chunker *c, const tsr_ids *ids, float weight)
{
    int32_t comma = tsr_tokenizer_comma(c->tok);
    int bt = c->opt->comma_backtrack;
    for (size_t p = 0; p < ids->n;) {
        int32_t token = ids->v[p];
        int ei = -1;
        const tsr_prompt_embedding *e = find_embedding(c->opt, ids, p, &ei);
        /* an embedding whose name starts with a comma is not a comma: a
         * backtrack there would split its vectors (A1111 would) */
        if (token == comma && !e) {
            c->last_comma = c->n;
        } else if (bt != 0 && c->n == TSR_CLIP_CHUNK && c->last_comma != -1 &&
                   c->n - c->last_comma <= bt) {
            int brk = c->last_comma + 1;
            int32_t rt[TSR_CLIP_CHUNK];
            float rw[TSR_CLIP_CHUNK];
            int32_t rf[TSR_CLIP_CHUNK];
            int rn = c->n - brk;
            memcpy(rt, c->cur + brk, (size_t)rn * sizeof(int32_t));
            memcpy(rw, c->curw + brk, (size_t)rn * sizeof(float));
            memcpy(rf, c->curf + brk, (size_t)rn * sizeof(int32_t));
            c->n = brk;
            TSR_TRY(next_chunk(c));
            memcpy(c->cur, rt, (size_t)rn * sizeof(int32_t));
            memcpy(c->curw, rw, (size_t)rn * sizeof(float));
            memcpy(c->curf, rf, (size_t)rn * sizeof(int32_t));
            c->n = rn;
        }
        if (c->n == TSR_CLIP_CHUNK)
            TSR_TRY(next_chunk(c));
        if (!e) {
            c->cur[c->n] = token;
            c->curw[c->n] = weight;
            c->curf[c->n] = -1;
            c->n++;
            p++;
            continue;
        }
        /* n vectors count as n tokens; a chunk they do not fit is closed */
        if (c->n + e->n_vectors > TSR_CLIP_CHUNK)
            TSR_TRY(next_chunk(c));
        for (int k = 0; k < e->n_vectors; k++) {
            c->cur[c->n] = 0;
            c->curw[c->n] = weight;
            c->curf[c->n] = TSR_PROMPT_FIX(ei, k);
            c->n++;
        }
        p += (size_t)e->n_ids;
    }
    return 0;
}

int tsr_prompt_tokenize(tsr_tokenizer *tok, const char *prompt, size_t len,
                        const tsr_prompt_options *opt, tsr_prompt_tokens *out)
{
    tsr_prompt_options def;
    if (!opt) {
        tsr_prompt_options_init(&def);
        opt = &def;
    }
    *out = (tsr_prompt_tokens){0};
    if (tsr_tokenizer_pad(tok) < 0)
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "tokenizer: no pad token (pad_token is null)");
    tsr_prompt_parsed parsed = {0};
    tsr_prompt_segment whole;
    tsr_ids ids = {0};
    int rc = 0;
    chunker c = {.tok = tok, .opt = opt, .out = out, .n = 0, .last_comma = -1};
    const tsr_prompt_segment *segs;
    size_t nseg;
    if (opt->emphasis) {
        TSR_CHECK_GOTO(rc, tsr_prompt_parse(prompt, len, &parsed), cleanup);
        segs = parsed.seg;
        nseg = parsed.n;
    } else {
        whole.text = NULL;
        whole.weight = 1.0;
        segs = &whole;
        nseg = 1;
    }
    for (size_t i = 0; i < nseg; i++) {
        if (segs[i].weight == -1.0 && segs[i].text && strcmp(segs[i].text, "BREAK") == 0) {
            TSR_CHECK_GOTO(rc, next_chunk(&c), cleanup);
            continue;
        }
        ids.n = 0;
        if (segs[i].text)
            TSR_CHECK_GOTO(rc, tsr_tokenizer_encode(tok, segs[i].text, strlen(segs[i].text), &ids),
                           cleanup);
        else
            TSR_CHECK_GOTO(rc, tsr_tokenizer_encode(tok, prompt, len, &ids), cleanup);
        TSR_CHECK_GOTO(rc, chunk_tokens(&c, &ids, (float)segs[i].weight), cleanup);
    }
    if (c.n > 0 || out->n_chunks == 0)
        TSR_CHECK_GOTO(rc, next_chunk(&c), cleanup);
cleanup:
    if (rc < 0)
        tsr_prompt_tokens_free(out);
    tsr_ids_free(&ids);
    tsr_prompt_parsed_free(&parsed);
    return rc;
}

int tsr_prompt_tokens_pad_chunks(tsr_prompt_tokens *t, const tsr_tokenizer *tok, int n_chunks)
{
    if (n_chunks < 0 || n_chunks > (1 << 20))
        return tsr_errorf(TSR_ERR_RANGE, "prompt: %d chunks is out of range", n_chunks);
    while (t->n_chunks < n_chunks)
        TSR_TRY(emit_window(t, tok, NULL, NULL, NULL, 0, 0));
    return 0;
}
