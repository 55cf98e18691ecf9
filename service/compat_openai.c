/*
 * service/compat_openai.c - the OpenAI-compatible images API (/v1/images/...).
 * Placeholder until the routes land: every path answers 404.
 */
#include "http.h"

void svc_route_openai_images(svc_req *r, const char *rest)
{
    (void)rest;
    svc_reply_error(r, 404, "not_found", NULL, "no such path: %s", r->path);
}
