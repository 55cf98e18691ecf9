/*
 * service/api/comfy/comfy_int.h - what the validator (comfy_graph.c) and
 * the compiler (comfy_plan.c) share: the graph being read and its helpers.
 * Not for other modules: they see comfy.h.
 */
#ifndef SVC_COMFY_INT_H
#define SVC_COMFY_INT_H

#include "comfy.h"

typedef struct gnode {
    const char *id;             /* borrowed from the prompt */
    const cJSON *inputs;        /* the node's "inputs" object (may be NULL) */
    const comfy_class *cls;
    int state;                  /* 0 new, 1 on the walk's path, 2 checked */
    bool ok;                    /* checked without errors (its inputs too) */
    cJSON *errors;              /* owned until moved into node_errors */
    cJSON *dependents;          /* output ids that need it */
} gnode;

typedef struct comfy_graph {
    gnode nodes[COMFY_MAX_NODES];
    int n;
    const comfy_context *ctx;
    comfy_plan *plan;
    int chain;                  /* the chain being compiled (comfy_plan.c) */
    int n_errors;
} comfy_graph;

typedef comfy_graph graph;

/* Add an error to nd (at most 16 per node), counted in g. */
void comfy_node_error(graph *g, gnode *nd, const char *type, const char *message,
                      const char *input, const cJSON *received, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
gnode *comfy_find(graph *g, const char *id);
const comfy_input *comfy_class_input(const comfy_class *c, const char *name);
/* A link's shape: ["<id>", <index >= 0>]. */
bool comfy_link_shape(const cJSON *v, const char **id, int *index);
/* The second pass (comfy_plan.c): the outputs' chains into
 * g->plan->chains[].job, the outputs into g->plan->outputs; false after
 * node errors. */
bool comfy_emit(graph *g, gnode **outs, int n_outs);

#endif
