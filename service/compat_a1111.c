/*
 * service/compat_a1111.c - the AUTOMATIC1111-compatible API (/sdapi/v1/...).
 * Placeholder until the routes land: every path answers 404.
 */
#include "http.h"

void svc_route_a1111(svc_req *r, const char *rest)
{
    (void)rest;
    svc_reply_error(r, 404, "not_found", NULL, "no such path: %s", r->path);
}
