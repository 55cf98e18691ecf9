/*
 * service/api/a1111/a1111_embeddings.c - GET /sdapi/v1/embeddings: the
 * textual-inversion embeddings of --embeddings-dir in A1111's shape.
 *
 * Why read from the folder on every call: the workers' engines reload the
 * folder when it changes (pipeline/embeddings.c), so the list a client sees
 * is what the next image will use, and POST /refresh-embeddings has nothing
 * to do.  The listing goes through tsr_engine_embeddings on engine 0, which
 * reads only the engine's fixed facts (the folder, the encoders' widths),
 * never what its own thread is using.  A skipped entry carries Tessera's
 * "error" besides A1111's fields, so an operator sees why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a1111.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "server.h"
#include "tessera.h"

static cJSON *entry(const tsr_embedding_info *e)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddItemToObject(o, "step", cJSON_CreateNull());
    cJSON_AddItemToObject(o, "sd_checkpoint", cJSON_CreateNull());
    cJSON_AddItemToObject(o, "sd_checkpoint_name", cJSON_CreateNull());
    cJSON_AddNumberToObject(o, "shape", e->shape);
    cJSON_AddNumberToObject(o, "vectors", e->vectors);
    if (!e->loaded && e->error)
        cJSON_AddStringToObject(o, "error", e->error);
    return o;
}

void svc_a1111_embeddings(svc_req *r, const char *rest)
{
    (void)rest;
    tsr_embedding_info *list = NULL;
    int n = 0;
    if (r->srv->engine0 && tsr_engine_embeddings(r->srv->engine0, &list, &n) < 0)
        SVC_WARN("/sdapi/v1/embeddings: %s", tsr_last_error());
    cJSON *root = cJSON_CreateObject();
    cJSON *loaded = cJSON_CreateObject(), *skipped = cJSON_CreateObject();
    if (root && loaded && skipped) {
        cJSON_AddItemToObject(root, "loaded", loaded);
        cJSON_AddItemToObject(root, "skipped", skipped);
        loaded = skipped = NULL;
        for (int i = 0; i < n; i++) {
            cJSON *o = entry(&list[i]);
            if (o)
                cJSON_AddItemToObject(cJSON_GetObjectItem(root, list[i].loaded ? "loaded" : "skipped"),
                                      list[i].name, o);
        }
    }
    cJSON_Delete(loaded);
    cJSON_Delete(skipped);
    tsr_embedding_info_free(list, n);
    svc_reply_json(r, 200, root);
}
