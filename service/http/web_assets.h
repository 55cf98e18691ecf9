/*
 * service/http/web_assets.h - the page (web/), compiled in: the table is
 * generated at build time by cmake/embed.cmake (build/generated/web_assets.c).
 */
#ifndef SVC_WEB_ASSETS_H
#define SVC_WEB_ASSETS_H

#include <stddef.h>

typedef struct svc_web_asset {
    const char *name;          /* "index.html", "app.js", "style.css"; NULL ends the table */
    const char *content_type;
    const unsigned char *data;
    size_t len;
} svc_web_asset;

extern const svc_web_asset svc_web_assets[];

#endif
