/*
 * service/api/comfy/comfy_graph.c - a ComfyUI workflow (API format) in,
 * a validated plan out: one native job object, or ComfyUI's 400 body.
 *
 * Why two passes: ComfyUI answers a bad workflow with every problem at
 * once ("node_errors", keyed by node id, each with its class and the
 * outputs that depend on it), and a client shows them on the nodes.  So
 * the first pass checks every node reachable from an output against the
 * class table (comfy_nodes.c) - links (shape, target, output index, type),
 * cycles, depth, widget values (type, range, choices) - and collects
 * errors instead of stopping at the first.  Only a graph with none reaches
 * the second pass (comfy_plan.c), which walks the output chain backwards (SaveImage <-
 * VAEDecode <- KSampler <- latent source) and writes the native fields;
 * a graph Tessera cannot run as native jobs (too many chains, a hires pass
 * with other settings than the first) is refused there, again as a node
 * error naming the node and input.  Nothing is queued before both passes
 * succeed, so nothing runs half a graph.
 *
 * Bounds: at most COMFY_MAX_NODES nodes, ids of COMFY_MAX_ID bytes, links
 * COMFY_MAX_DEPTH deep, strings COMFY_MAX_TEXT bytes; the walk is
 * recursive but its depth is bounded by COMFY_MAX_DEPTH, and every node
 * is visited once (a state per node), so a hostile graph costs time
 * linear in its size.
 */
#include "comfy_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

/* --------------------------------------------------------------- errors */

cJSON *comfy_error_body(const char *type, const char *message, const char *details)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "details", details ? details : "");
    cJSON_AddObjectToObject(e, "extra_info");
    cJSON_AddObjectToObject(o, "node_errors");
    return o;
}

void comfy_node_error(graph *g, gnode *nd, const char *type, const char *message,
                      const char *input, const cJSON *received, const char *fmt, ...)
{
    char details[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(details, sizeof details, fmt, ap);
    va_end(ap);
    if (!nd->errors)
        nd->errors = cJSON_CreateArray();
    if (cJSON_GetArraySize(nd->errors) >= 16)
        return; /* a bound on what one node reports */
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "details", details);
    cJSON *x = cJSON_AddObjectToObject(e, "extra_info");
    if (input)
        cJSON_AddStringToObject(x, "input_name", input);
    if (received) {
        /* a short copy: a huge string is not echoed whole */
        if (cJSON_IsString(received) && strlen(received->valuestring) > 256)
            cJSON_AddStringToObject(x, "received_value", "(a long string)");
        else if (!cJSON_IsArray(received) && !cJSON_IsObject(received))
            cJSON_AddItemToObject(x, "received_value", cJSON_Duplicate(received, false));
    }
    cJSON_AddItemToArray(nd->errors, e);
    nd->ok = false;
    g->n_errors++;
}

/* The whole 400 body: every node with errors, with its dependent outputs. */
static cJSON *failed_body(graph *g)
{
    cJSON *o = comfy_error_body("prompt_outputs_failed_validation",
                                "Prompt outputs failed validation", "");
    cJSON *ne = cJSON_GetObjectItemCaseSensitive(o, "node_errors");
    char details[1024] = "";
    size_t dl = 0;
    for (int i = 0; i < g->n; i++) {
        gnode *nd = &g->nodes[i];
        if (!nd->errors)
            continue;
        cJSON *entry = cJSON_CreateObject();
        cJSON_AddItemToObject(entry, "errors", nd->errors);
        nd->errors = NULL;
        cJSON_AddItemToObject(entry, "dependent_outputs",
                              nd->dependents ? nd->dependents : cJSON_CreateArray());
        nd->dependents = NULL;
        cJSON_AddStringToObject(entry, "class_type", nd->cls ? nd->cls->name : "");
        const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(entry, "errors"), 0);
        const cJSON *msg = cJSON_GetObjectItem(first, "message");
        const cJSON *det = cJSON_GetObjectItem(first, "details");
        if (dl < sizeof details - 1 && cJSON_IsString(msg))
            dl += (size_t)snprintf(details + dl, sizeof details - dl, "%s%s (node %.64s, %s): %.200s",
                                   dl ? "; " : "", msg->valuestring, nd->id,
                                   nd->cls ? nd->cls->name : "?",
                                   cJSON_IsString(det) ? det->valuestring : "");
        cJSON_AddItemToObject(ne, nd->id, entry);
    }
    if (dl >= sizeof details)
        dl = sizeof details - 1;
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(o, "error"), "details",
                              cJSON_CreateString(details));
    return o;
}

/* ------------------------------------------------------------ the nodes */

gnode *comfy_find(graph *g, const char *id)
{
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->nodes[i].id, id) == 0)
            return &g->nodes[i];
    return NULL;
}

const comfy_input *comfy_class_input(const comfy_class *c, const char *name)
{
    for (int i = 0; i < COMFY_MAX_INPUTS && c->inputs[i].name; i++)
        if (strcmp(c->inputs[i].name, name) == 0)
            return &c->inputs[i];
    return NULL;
}

static bool is_link_type(comfy_type t) { return t >= CT_MODEL; }

bool comfy_link_shape(const cJSON *v, const char **id, int *index)
{
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        return false;
    const cJSON *a = cJSON_GetArrayItem(v, 0), *b = cJSON_GetArrayItem(v, 1);
    if (!cJSON_IsString(a) || !cJSON_IsNumber(b))
        return false;
    double d = b->valuedouble;
    if (!(d >= 0 && d < COMFY_MAX_OUTPUTS + 1000) || d != floor(d))
        return false;
    *id = a->valuestring;
    *index = (int)d;
    return true;
}

static void add_dependent(gnode *nd, const char *output)
{
    if (!nd->dependents)
        nd->dependents = cJSON_CreateArray();
    const cJSON *it;
    cJSON_ArrayForEach(it, nd->dependents)
        if (strcmp(it->valuestring, output) == 0)
            return;
    cJSON_AddItemToArray(nd->dependents, cJSON_CreateString(output));
}

static bool in_list(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (strcmp(*list, s) == 0)
            return true;
    return false;
}

static void list_text(const char *const *list, char *buf, size_t size)
{
    size_t o = 0;
    buf[0] = '\0';
    for (; *list && o + 1 < size; list++)
        o += (size_t)snprintf(buf + o, size - o, "%s'%s'", o ? ", " : "", *list);
}

/* A widget's value against its row of the table. */
static void check_widget(graph *g, gnode *nd, const comfy_input *in, const cJSON *v)
{
    char buf[400];
    switch (in->type) {
    case CT_INT:
    case CT_FLOAT: {
        if (!cJSON_IsNumber(v)) {
            comfy_node_error(g, nd, "invalid_input_type",
                       in->type == CT_INT ? "Failed to convert an input value to a INT value"
                                          : "Failed to convert an input value to a FLOAT value",
                       in->name, v, "%s, not a number", in->name);
            return;
        }
        const char *lit = svc_json_literal(v);
        if (in->type == CT_INT && lit && !svc_json_literal_is_integer(lit) &&
            v->valuedouble != floor(v->valuedouble)) {
            comfy_node_error(g, nd, "invalid_input_type",
                       "Failed to convert an input value to a INT value", in->name, v,
                       "%s, %s is not an integer", in->name, lit);
            return;
        }
        if (v->valuedouble < in->min) {
            snprintf(buf, sizeof buf, "Value %.17g smaller than min of %.17g", v->valuedouble,
                     in->min);
            comfy_node_error(g, nd, "value_smaller_than_min", buf, in->name, v, "%s", in->name);
        } else if (v->valuedouble > in->max) {
            snprintf(buf, sizeof buf, "Value %.17g bigger than max of %.17g", v->valuedouble,
                     in->max);
            comfy_node_error(g, nd, "value_bigger_than_max", buf, in->name, v, "%s", in->name);
        } else if (in->max == 18446744073709551615.0 && lit) {
            /* a seed: the literal itself must fit 64 bits */
            errno = 0;
            char *end = NULL;
            (void)strtoull(lit, &end, 10);
            if (errno || !end || *end || lit[0] == '-')
                comfy_node_error(g, nd, "value_bigger_than_max",
                           "Value bigger than max of 18446744073709551615", in->name, v,
                           "%s, %.40s is not an integer 0..2^64-1", in->name, lit);
        }
        return;
    }
    case CT_STRING:
        if (!cJSON_IsString(v))
            comfy_node_error(g, nd, "invalid_input_type", "Input must be a string", in->name, v, "%s",
                       in->name);
        else if (strlen(v->valuestring) > COMFY_MAX_TEXT)
            comfy_node_error(g, nd, "value_too_long", "String longer than the bound", in->name, NULL,
                       "%s holds %zu bytes, at most %d", in->name, strlen(v->valuestring),
                       COMFY_MAX_TEXT);
        else if (v->type & SVC_JSON_HAS_NUL)
            comfy_node_error(g, nd, "invalid_input_type", "Input must not hold U+0000", in->name, NULL,
                       "%s", in->name);
        return;
    case CT_BOOLEAN:
        if (!cJSON_IsBool(v))
            comfy_node_error(g, nd, "invalid_input_type", "Input must be a boolean", in->name, v, "%s",
                       in->name);
        return;
    case CT_COMBO: {
        const char *const *list = comfy_choice_list(in->choices, g->ctx);
        if (!cJSON_IsString(v) || !in_list(list, v->valuestring)) {
            list_text(list, buf, sizeof buf);
            comfy_node_error(g, nd, "value_not_in_list", "Value not in list", in->name, v,
                       "%s: '%.100s' not in [%s]", in->name,
                       cJSON_IsString(v) ? v->valuestring : "(not a string)", buf);
        }
        return;
    }
    default: return;
    }
}

static bool check_node(graph *g, gnode *nd, const char *output, int depth);

/* One link input: shape, target, index, type; then the target itself. */
static void check_link(graph *g, gnode *nd, const comfy_input *in, const cJSON *v,
                       const char *output, int depth)
{
    const char *id;
    int index;
    if (!comfy_link_shape(v, &id, &index)) {
        comfy_node_error(g, nd, "bad_linked_input",
                   "Bad linked input, must be a length-2 list of [string, int]", in->name, v,
                   "%s", in->name);
        return;
    }
    if (!is_link_type(in->type)) {
        comfy_node_error(g, nd, "return_type_mismatch", "Return type mismatch between linked nodes",
                   in->name, NULL, "%s: a link, but the input takes a %s value", in->name,
                   comfy_type_name(in->type));
        return;
    }
    gnode *t = comfy_find(g, id);
    if (!t) {
        comfy_node_error(g, nd, "bad_linked_input", "Linked node does not exist", in->name, NULL,
                   "%s: node '%.64s' is not in the prompt", in->name, id);
        return;
    }
    if (index >= t->cls->n_outputs) {
        comfy_node_error(g, nd, "return_type_mismatch", "Output index out of range", in->name, NULL,
                   "%s: %s (node %.64s) has %d output(s), index %d", in->name, t->cls->name, t->id,
                   t->cls->n_outputs, index);
        return;
    }
    if (t->cls->outputs[index] != in->type) {
        comfy_node_error(g, nd, "return_type_mismatch", "Return type mismatch between linked nodes",
                   in->name, NULL, "%s, received_type(%s) mismatch input_type(%s)", in->name,
                   comfy_type_name(t->cls->outputs[index]), comfy_type_name(in->type));
        return;
    }
    if (t->state == 1) {
        comfy_node_error(g, nd, "dependency_cycle", "Dependency cycle detected", in->name, NULL,
                   "%s: node '%.64s' (%s) depends on this node", in->name, t->id, t->cls->name);
        return;
    }
    if (!check_node(g, t, output, depth + 1))
        nd->ok = false; /* ComfyUI: a node whose input failed fails, without its own error */
}

/* Check nd and what it needs (once per node).  False when anything failed. */
static bool check_node(graph *g, gnode *nd, const char *output, int depth)
{
    add_dependent(nd, output);
    if (nd->state == 2)
        return nd->ok;
    if (depth > COMFY_MAX_DEPTH) {
        comfy_node_error(g, nd, "graph_too_deep", "The graph is too deep", NULL, NULL,
                   "more than %d links from output %.64s", COMFY_MAX_DEPTH, output);
        nd->state = 2;
        return false;
    }
    nd->state = 1;
    nd->ok = true;
    if (nd->inputs && !cJSON_IsObject(nd->inputs)) {
        comfy_node_error(g, nd, "invalid_prompt", "The node's inputs must be an object", NULL, NULL,
                   "inputs");
    } else {
        const comfy_class *c = nd->cls;
        for (int i = 0; i < COMFY_MAX_INPUTS && c->inputs[i].name; i++) {
            const comfy_input *in = &c->inputs[i];
            const cJSON *v = nd->inputs ? cJSON_GetObjectItemCaseSensitive(nd->inputs, in->name)
                                        : NULL;
            if (!v) {
                if (!in->optional)
                    comfy_node_error(g, nd, "required_input_missing", "Required input is missing",
                               in->name, NULL, "%s", in->name);
                continue;
            }
            if (is_link_type(in->type) || cJSON_IsArray(v))
                check_link(g, nd, in, v, output, depth);
            else
                check_widget(g, nd, in, v);
        }
    }
    nd->state = 2;
    /* post-order: dependencies first (the order ComfyUI would execute in) */
    comfy_plan *p = g->plan;
    if (p->n_order < COMFY_MAX_NODES) {
        p->order[p->n_order] = strdup(nd->id);
        p->order_class[p->n_order] = nd->cls->name;
        if (p->order[p->n_order])
            p->n_order++;
    }
    return nd->ok;
}

/* ------------------------------------------------------------- the entry */

void comfy_plan_free(comfy_plan *p)
{
    if (!p)
        return;
    for (int c = 0; c < p->n_chains; c++)
        cJSON_Delete(p->chains[c].job);
    for (int i = 0; i < p->n_order; i++)
        free(p->order[i]);
    memset(p, 0, sizeof *p);
}

/* bit on nd and everything it links to (a validated graph: no cycles,
 * COMFY_MAX_DEPTH deep); each node is entered once per bit */
static void mark_chain(graph *g, gnode *nd, unsigned char bit, unsigned char *marks, int depth)
{
    if (!nd || (marks[nd - g->nodes] & bit) || depth > COMFY_MAX_DEPTH)
        return;
    marks[nd - g->nodes] |= bit;
    for (int i = 0; i < COMFY_MAX_INPUTS && nd->cls->inputs[i].name; i++) {
        const char *id;
        int index;
        if (comfy_link_shape(cJSON_GetObjectItemCaseSensitive(nd->inputs, nd->cls->inputs[i].name),
                             &id, &index))
            mark_chain(g, comfy_find(g, id), bit, marks, depth + 1);
    }
}

static int cmp_ids(const void *a, const void *b)
{
    const gnode *x = *(gnode *const *)a, *y = *(gnode *const *)b;
    return strcmp(x->id, y->id);
}

int comfy_compile(const cJSON *prompt, const comfy_context *ctx, comfy_plan *plan, cJSON **error)
{
    memset(plan, 0, sizeof *plan);
    *error = NULL;
    char details[160];
    if (!cJSON_IsObject(prompt)) {
        *error = comfy_error_body("invalid_prompt", "The prompt must be an object of nodes",
                                  "prompt");
        return -1;
    }
    graph *g = calloc(1, sizeof *g);
    if (!g) {
        *error = comfy_error_body("internal", "out of memory", "");
        return -1;
    }
    g->ctx = ctx;
    g->plan = plan;
    const cJSON *it;
    cJSON_ArrayForEach(it, prompt) {
        if (g->n >= COMFY_MAX_NODES) {
            snprintf(details, sizeof details, "at most %d nodes", COMFY_MAX_NODES);
            *error = comfy_error_body("invalid_prompt", "The prompt has too many nodes", details);
            goto fail;
        }
        if (!it->string || !it->string[0] || strlen(it->string) > COMFY_MAX_ID) {
            snprintf(details, sizeof details, "node ids are 1..%d bytes", COMFY_MAX_ID);
            *error = comfy_error_body("invalid_prompt", "A node id is empty or too long", details);
            goto fail;
        }
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(it, "class_type");
        if (!cJSON_IsObject(it) || !cJSON_IsString(ct)) {
            snprintf(details, sizeof details, "Node ID '#%.64s'", it->string);
            *error = comfy_error_body(
                "invalid_prompt", "Cannot execute because a node is missing the class_type property.",
                details);
            goto fail;
        }
        const comfy_class *c = comfy_class_find(ct->valuestring);
        if (!c) {
            char msg[200];
            snprintf(msg, sizeof msg, "Cannot execute because node %.100s does not exist.",
                     ct->valuestring);
            snprintf(details, sizeof details, "Node ID '#%.64s'", it->string);
            *error = comfy_error_body("invalid_prompt", msg, details);
            goto fail;
        }
        gnode *nd = &g->nodes[g->n++];
        nd->id = it->string;
        nd->cls = c;
        nd->inputs = cJSON_GetObjectItemCaseSensitive(it, "inputs");
    }
    gnode *outs[COMFY_MAX_NODES];
    int n_outs = 0;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].cls->output_node)
            outs[n_outs++] = &g->nodes[i];
    if (!n_outs) {
        *error = comfy_error_body("prompt_no_outputs", "Prompt has no outputs", "");
        goto fail;
    }
    if (n_outs > (int)(sizeof plan->outputs / sizeof plan->outputs[0])) {
        *error = comfy_error_body("invalid_prompt", "The prompt has too many output nodes",
                                  "at most 8 SaveImage / PreviewImage nodes");
        goto fail;
    }
    qsort(outs, (size_t)n_outs, sizeof outs[0], cmp_ids);
    for (int i = 0; i < n_outs; i++)
        check_node(g, outs[i], outs[i]->id, 0);
    if (g->n_errors == 0)
        comfy_emit(g, outs, n_outs);
    if (g->n_errors) {
        *error = failed_body(g);
        goto fail;
    }
    /* which chains need each executed node (the websocket's messages) */
    unsigned char marks[COMFY_MAX_NODES] = {0};
    for (int k = 0; k < plan->n_outputs; k++)
        mark_chain(g, comfy_find(g, plan->outputs[k].node),
                   (unsigned char)(1u << plan->outputs[k].chain), marks, 0);
    for (int i = 0; i < plan->n_order; i++) {
        const gnode *nd = comfy_find(g, plan->order[i]);
        plan->order_chains[i] = nd ? marks[nd - g->nodes] : 0;
    }
    /* each job as the text POST /v1/jobs would get, read back by the strict
     * reader: numbers then carry their literals (integers stay integers,
     * a seed keeps all 64 bits), exactly as a native body's do */
    for (int c = 0; c < plan->n_chains; c++) {
        char *text = cJSON_PrintUnformatted(plan->chains[c].job);
        char perr[128];
        cJSON *reread = text ? svc_json_parse(text, strlen(text), perr, sizeof perr) : NULL;
        free(text);
        if (!reread) {
            *error = comfy_error_body("internal", "the compiled job could not be written", "");
            goto fail;
        }
        cJSON_Delete(plan->chains[c].job);
        plan->chains[c].job = reread;
    }
    for (int i = 0; i < g->n; i++) {
        cJSON_Delete(g->nodes[i].errors);
        cJSON_Delete(g->nodes[i].dependents);
    }
    free(g);
    return 0;
fail:
    for (int i = 0; i < g->n; i++) {
        cJSON_Delete(g->nodes[i].errors);
        cJSON_Delete(g->nodes[i].dependents);
    }
    free(g);
    comfy_plan_free(plan);
    return -1;
}

