/*
 * service/api/comfy/comfy_ui.h - ComfyUI's own web UI on Tessera (issue 59,
 * docs/compat-comfyui.md "The web UI"): `serve --comfy-ui DIR` serves the
 * frontend's static folder (PyPI's comfyui-frontend-package) at /comfy/, and
 * the routes the frontend calls besides the API ones of comfy.h: users,
 * settings, user data (comfy_userdata.c), feature flags, translations, model
 * folders and the other lists a fresh ComfyUI answers (comfy_ui.c).
 *
 * The frontend derives its API base from its own path: served at /comfy/ it
 * calls /comfy/api/<route> and opens /comfy/ws, which svc_comfy_ui_rewrite
 * turns into /api/<route> and /ws before the route table is read.
 */
#ifndef SVC_COMFY_UI_H
#define SVC_COMFY_UI_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

struct svc_req;
struct svc_server;

/* The server's feature flags, ComfyUI's shape (owned): GET /features and the
 * websocket's answer to a client's feature_flags message.  Previews with
 * metadata (type 4: node and prompt named) go to clients that take them. */
cJSON *comfy_ui_feature_flags(struct svc_server *s);

/* Where the frontend is served (the table's root for its files). */
#define COMFY_UI_ROOT "/comfy"

/* A path under one of the UI's route roots (/users, /settings, /userdata,
 * /v2/userdata, /jobs, /features, /i18n, ...): /api/ is stripped from it and keys
 * apply, as for svc_comfy_is_path. */
bool svc_comfy_ui_is_path(const char *path);
/* With --comfy-ui: /comfy/api/<x> becomes /api/<x> and /comfy/ws becomes
 * /ws in r->path (in place).  True when it rewrote the path. */
bool svc_comfy_ui_rewrite(struct svc_req *r);
/* Whether a POST to this path may carry a body of any type when the
 * request has ComfyUI's Comfy-User header (the frontend posts settings and
 * user data as text/plain; a page on another site cannot send that header
 * without a CORS preflight). */
bool svc_comfy_ui_any_body(struct svc_req *r);

/* The path checks (fuzz/fuzz_comfy_ui_paths.c).  A static file's path
 * after /comfy/ (comfy_ui.c): 1..1024 bytes, at most 32 names, each 1..255
 * bytes >= 0x20 but DEL, no '\', not starting with '.'.  A user data path
 * (comfy_userdata.c): 1..512 bytes, at most 16 names, each 1..255 bytes
 * >= 0x20 but DEL, none of \ : * ? " < > |, not starting with '.'. */
bool comfy_ui_path_ok(const char *rel);
bool comfy_userdata_path_ok(const char *rel);

/* Signing in with a key (comfy_login.c, docs/security.md "The web UI's
 * sessions"): the session cookie's name and its token's length (hex of
 * 256 random bits). */
#define COMFY_COOKIE "tessera_comfy"
#define COMFY_TOKEN_HEX 64
struct svc_key;
struct svc_comfy_login;
/* The token of a Cookie header's tessera_comfy (exactly COMFY_TOKEN_HEX
 * of [0-9a-f]; the first such one) into out (size > COMFY_TOKEN_HEX);
 * false when there is none (fuzz/fuzz_comfy_ui_paths.c). */
bool comfy_login_cookie_token(const char *header, char *out, size_t size);
/* The key of the request's live session cookie, or NULL (keys off, no
 * cookie, unknown or expired). */
const struct svc_key *svc_comfy_session_key(struct svc_req *r);
/* With keys on and no live session: answered 302 to /comfy/login (true). */
bool svc_comfy_ui_signed_out(struct svc_req *r);
/* GET /comfy/login: the sign-in page; POST: {"key"} -> the cookie. */
void svc_comfy_login(struct svc_req *r, const char *rest);
/* POST /comfy/logout: the session ends, the cookie is cleared. */
void svc_comfy_logout(struct svc_req *r, const char *rest);
void svc_comfy_login_free(struct svc_comfy_login *l);

/* GET /comfy/<file>: the frontend's static files (comfy_ui.c). */
void svc_comfy_ui_static(struct svc_req *r, const char *rest);
/* GET /assets/<file>: the frontend's assets/ (URLs it writes absolute). */
void svc_comfy_ui_assets(struct svc_req *r, const char *rest);
/* The lists a fresh ComfyUI answers (comfy_ui.c). */
void svc_comfy_features(struct svc_req *r, const char *rest);
void svc_comfy_i18n(struct svc_req *r, const char *rest);
void svc_comfy_empty_object(struct svc_req *r, const char *rest);
void svc_comfy_experiment_models(struct svc_req *r, const char *rest);
void svc_comfy_prompt_info(struct svc_req *r, const char *rest);
/* GET /jobs, /jobs/{id}: the prompts as ComfyUI's jobs API lists them
 * (comfy_jobs.c). */
void svc_comfy_jobs(struct svc_req *r, const char *rest);
/* POST /jobs/{id}/cancel, POST /jobs/cancel (comfy_jobs.c). */
void svc_comfy_jobs_cancel(struct svc_req *r, const char *rest);
/* Users, settings and user data (comfy_userdata.c). */
void svc_comfy_users(struct svc_req *r, const char *rest);
void svc_comfy_settings(struct svc_req *r, const char *rest);
void svc_comfy_userdata_list(struct svc_req *r, const char *rest);
void svc_comfy_userdata_v2(struct svc_req *r, const char *rest);
void svc_comfy_userdata(struct svc_req *r, const char *rest);

#endif
