/*
 * service/api/comfy/comfy_ws.c - ComfyUI's websocket, GET /ws?clientId=:
 * a small RFC 6455 layer on an evhttp connection, and the fan-out of
 * ComfyUI's messages to the sockets of one client id.
 *
 * Why a layer of our own: libevent 2.1 (Debian bookworm) has no websocket
 * support, and only a little of RFC 6455 is needed: the handshake
 * (Sec-WebSocket-Accept = base64(SHA-1(key + the RFC's GUID)), SHA-1 from
 * OpenSSL's libcrypto, which the server links already), unfragmented
 * server frames (text for JSON, binary for previews), and reading client
 * frames to answer ping and close and to take the frontend's
 * {"type": "feature_flags"} (other data frames are read and dropped).
 *
 * Previews: a frame of ComfyUI's plain layout (type 1, format, JPEG) goes
 * as is, or, to a socket whose client said supports_preview_metadata (the
 * web UI; it shows a node's preview only from these), as type 4: a JSON
 * head naming the node and prompt of the socket's last "progress" or
 * "executing" message, then the image.
 *
 * How it rides on evhttp: the 101 reply is started with
 * evhttp_send_reply_start, which writes the head; evhttp drops body bytes
 * of a 1xx reply, so from then on the frames go to the connection's
 * bufferevent directly, with our read and write callbacks in place of
 * evhttp's (its error callback stays, so a close reaches svc_peer,
 * stream.h).  Client frames are read from the bufferevent's input,
 * bounded by a read watermark.  At the end the request is marked
 * "Connection: close" and ended, so evhttp frees the connection once the
 * last bytes have left instead of reading a next request from it.
 *
 * Flow control, as the SSE streams: at most WS_OUT_HIGH bytes are handed
 * to the socket at a time; what comes meanwhile waits in `pending`, and a
 * preview is sent only to a socket with nothing waiting.  A socket whose pending bytes pass
 * WS_PENDING_MAX (a client that stopped reading) is closed; a ping goes
 * out every 15 s, so a live client's pong keeps evhttp's 50 s timeout away.
 */
#include "comfy.h"
#include "comfy_ui.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/evp.h>

#include "auth.h"
#include "clock.h"
#include "codec.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "server.h"
#include "stream.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11" /* RFC 6455 1.3 */
#define WS_FRAME_MAX (64u << 10)     /* a client frame's payload */
#define WS_READ_MAX (256u << 10)     /* the input read before we parse */
#define WS_PENDING_MAX (8u << 20)    /* waiting bytes before a slow socket is closed */
#define WS_OUT_HIGH (64u << 10)      /* bytes handed to the socket at a time */
#define WS_PING_S 15
#define WS_MAX_CONNS 1024

typedef struct ws_conn {
    svc_server *srv;
    svc_req *r;
    svc_peer peer;
    struct bufferevent *bev;
    struct evbuffer *pending;
    struct event *ping;
    char sid[129];
    const svc_key *key;         /* whose socket (keys on); it hears only what this key sees */
    /* evhttp's callbacks, put back for the end (its write callback ends the reply) */
    bufferevent_data_cb ev_read, ev_write;
    bufferevent_event_cb ev_event;
    void *ev_arg;
    bool closing, done;
    bool preview_metadata;      /* the client takes type-4 previews (feature_flags) */
    char node[COMFY_MAX_ID + 1], prompt_id[64]; /* its last progress / executing */
    struct ws_conn *prev, *next;
} ws_conn;

static ws_conn *live; /* the loop's; one server per process */
static int n_live;

/* ------------------------------------------------------------- framing */

/* One unfragmented server frame (unmasked, RFC 6455 5.1). */
static void put_frame(struct evbuffer *out, int opcode, const void *data, size_t len)
{
    uint8_t h[10];
    size_t n = 0;
    h[n++] = (uint8_t)(0x80 | opcode);
    if (len < 126) {
        h[n++] = (uint8_t)len;
    } else if (len < 65536) {
        h[n++] = 126;
        h[n++] = (uint8_t)(len >> 8);
        h[n++] = (uint8_t)len;
    } else {
        h[n++] = 127;
        for (int i = 7; i >= 0; i--)
            h[n++] = (uint8_t)((uint64_t)len >> (8 * i));
    }
    evbuffer_add(out, h, n);
    if (len)
        evbuffer_add(out, data, len);
}

/* ---------------------------------------------------------- the socket */

static void free_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ws_conn *c = arg;
    svc_peer_release(&c->peer, c->r, true, 101);
    if (c->pending)
        evbuffer_free(c->pending);
    free(c);
}

/* Done with c: unlink, stop, free at a safe point. */
static void conn_finish(ws_conn *c)
{
    if (c->done)
        return;
    c->done = true;
    if (c->ping) {
        event_free(c->ping);
        c->ping = NULL;
    }
    if (c->prev)
        c->prev->next = c->next;
    else if (live == c)
        live = c->next;
    if (c->next)
        c->next->prev = c->prev;
    n_live--;
    struct timeval zero = {0, 0};
    if (event_base_once(c->srv->base, -1, EV_TIMEOUT, free_later, c, &zero) < 0)
        free_later(-1, 0, c);
}

static bool usable(const ws_conn *c)
{
    return !c->done && !c->peer.closed && svc_peer_answerable(&c->peer);
}

/* End the reply: evhttp then closes the connection (not a next request). */
static void conn_end(ws_conn *c)
{
    if (usable(c)) {
        struct evkeyvalq *in = evhttp_request_get_input_headers(c->r->req);
        evhttp_remove_header(in, "Connection");
        evhttp_add_header(in, "Connection", "close");
        svc_peer_stop(&c->peer);
        /* evhttp's write callback again: it ends the reply (and closes) once
         * the last frame has left */
        bufferevent_setcb(c->bev, c->ev_read, c->ev_write, c->ev_event, c->ev_arg);
        svc_req *r = c->r;
        c->r = NULL;
        evhttp_send_reply_end(r->req);
        r->req = NULL;
        svc_req_finish(r, 101);
    }
    conn_finish(c);
}

static void on_read(struct bufferevent *bev, void *arg);
static void on_write(struct bufferevent *bev, void *arg);
static void send_frame(struct ws_conn *c, int opcode, const void *data, size_t len);

/* After the 101's head, the connection's reads and writes are ours (evhttp
 * drops body bytes of a 1xx reply, so frames go to the bufferevent
 * directly); evhttp keeps its error callback, which notices the close. */
static void take_over(ws_conn *c)
{
    bufferevent_getcb(c->bev, &c->ev_read, &c->ev_write, &c->ev_event, &c->ev_arg);
    bufferevent_setcb(c->bev, on_read, on_write, c->ev_event, c->ev_arg);
    bufferevent_setwatermark(c->bev, EV_READ, 0, WS_READ_MAX);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

static ws_conn *find_conn(struct bufferevent *bev)
{
    ws_conn *c = live;
    while (c && c->bev != bev)
        c = c->next;
    return c;
}

/* Move pending frames to the socket when what is there has left (one
 * WS_OUT_HIGH at a time), or all of it (force: the close). */
static void flush(ws_conn *c, bool force)
{
    if (!usable(c) || !evbuffer_get_length(c->pending))
        return;
    if (!force && evbuffer_get_length(bufferevent_get_output(c->bev)) > WS_OUT_HIGH)
        return;
    c->r->bytes_out += evbuffer_get_length(c->pending);
    bufferevent_write_buffer(c->bev, c->pending);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    (void)arg;
    ws_conn *c = find_conn(bev);
    if (c)
        flush(c, false);
}

static size_t waiting(const ws_conn *c)
{
    return evbuffer_get_length(c->pending) + evbuffer_get_length(bufferevent_get_output(c->bev));
}

static void send_frame(ws_conn *c, int opcode, const void *data, size_t len)
{
    if (c->done || c->closing)
        return;
    if (waiting(c) + len > WS_PENDING_MAX) {
        SVC_INFO("comfy ws %s: the client stopped reading; closed", c->sid);
        conn_end(c);
        return;
    }
    put_frame(c->pending, opcode, data, len);
    flush(c, false);
}

/* The close frame, then the end (evhttp closes once it has left). */
static void send_close(ws_conn *c, uint16_t code)
{
    if (c->done || c->closing)
        return;
    uint8_t b[2] = {(uint8_t)(code >> 8), (uint8_t)code};
    put_frame(c->pending, 0x8, b, 2);
    c->closing = true;
    flush(c, true);
    conn_end(c);
}

/* A client's text frame: {"type": "feature_flags", "data": {...}} sets the
 * socket's preview layout and is answered with the server's flags, as
 * ComfyUI does; anything else is dropped. */
static void client_message(ws_conn *c, const uint8_t *payload, size_t len)
{
    char err[128];
    cJSON *m = svc_json_parse((const char *)payload, len, err, sizeof err);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "feature_flags") == 0) {
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(m, "data");
        c->preview_metadata =
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(data, "supports_preview_metadata"));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "feature_flags");
        cJSON_AddItemToObject(o, "data", comfy_ui_feature_flags(c->srv));
        char *text = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (text)
            send_frame(c, 0x1, text, strlen(text));
        free(text);
    }
    cJSON_Delete(m);
}

/* Client frames: masked (else 1002), at most WS_FRAME_MAX (else 1009);
 * ping -> pong, close -> close, the rest read and dropped. */
static void on_read(struct bufferevent *bev, void *arg)
{
    (void)arg;
    ws_conn *c = find_conn(bev);
    struct evbuffer *in = bufferevent_get_input(bev);
    if (!c) {
        evbuffer_drain(in, evbuffer_get_length(in));
        return;
    }
    for (;;) {
        if (c->done || c->closing)
            return; /* ended (a pong past the slow-client cut): its buffers may be gone */
        size_t avail = evbuffer_get_length(in);
        if (avail < 2)
            return;
        uint8_t h[14];
        evbuffer_copyout(in, h, avail < 14 ? avail : 14);
        const int opcode = h[0] & 0x0f;
        const bool masked = (h[1] & 0x80) != 0;
        uint64_t len = h[1] & 0x7f;
        size_t hl = 2;
        if (len == 126) {
            if (avail < 4)
                break;
            len = ((uint64_t)h[2] << 8) | h[3];
            hl = 4;
        } else if (len == 127) {
            if (avail < 10)
                break;
            len = 0;
            for (int i = 0; i < 8; i++)
                len = (len << 8) | h[2 + i];
            hl = 10;
        }
        if ((h[0] & 0x70) || !masked) {
            send_close(c, 1002);
            return; /* the connection may be gone with its buffers */
        }
        if (len > WS_FRAME_MAX) {
            send_close(c, 1009);
            return; /* the connection may be gone with its buffers */
        }
        if (avail < hl + 4 + len)
            break;
        uint8_t mask[4];
        memcpy(mask, h + hl, 4);
        evbuffer_drain(in, hl + 4);
        uint8_t *payload = malloc(len ? len : 1);
        if (!payload) {
            conn_end(c);
            return;
        }
        evbuffer_remove(in, payload, len);
        for (uint64_t i = 0; i < len; i++)
            payload[i] ^= mask[i & 3];
        if (opcode == 0x9) {
            if (len <= 125)
                send_frame(c, 0xA, payload, len);
        } else if (opcode == 0x1) {
            client_message(c, payload, (size_t)len);
        } else if (opcode == 0x8) {
            free(payload);
            send_close(c, 1000);
            return; /* the connection may be gone with its buffers */
        } else if (opcode != 0x0 && opcode != 0x1 && opcode != 0x2 && opcode != 0xA) {
            free(payload);
            send_close(c, 1002);
            return; /* the connection may be gone with its buffers */
        }
        free(payload);
    }
}

static void on_gone(void *arg)
{
    ws_conn *c = arg;
    conn_finish(c);
}

static void on_ping(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ws_conn *c = arg;
    send_frame(c, 0x9, "tessera", 7);
}

/* ----------------------------------------------------------- messages */

int comfy_ws_clients(const char *sid)
{
    int n = 0;
    for (ws_conn *c = live; c; c = c->next)
        n += !c->done && (!sid || strcmp(c->sid, sid) == 0);
    return n;
}

/* Whether c is one of sid's sockets that may hear about a prompt of owner. */
static bool hears(const ws_conn *c, const char *sid, const char *owner)
{
    return (!sid || strcmp(c->sid, sid) == 0) && (!owner || svc_key_sees(c->key, owner));
}

void comfy_ws_send(const char *sid, const char *owner, const char *type, cJSON *data)
{
    /* the node a later preview belongs to (copied: data goes with o) */
    char node[COMFY_MAX_ID + 1] = "", pid[64] = "";
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(data, "node");
    const cJSON *jp = cJSON_GetObjectItemCaseSensitive(data, "prompt_id");
    const bool track = (strcmp(type, "progress") == 0 || strcmp(type, "executing") == 0) &&
                       cJSON_IsString(jp);
    if (track) {
        snprintf(node, sizeof node, "%s", cJSON_IsString(jn) ? jn->valuestring : "");
        snprintf(pid, sizeof pid, "%s", jp->valuestring);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddItemToObject(o, "data", data);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text)
        return;
    size_t len = strlen(text);
    for (ws_conn *c = live, *next; c; c = next) {
        next = c->next;
        if (!hears(c, sid, owner))
            continue;
        if (track) {
            memcpy(c->node, node, sizeof node);
            memcpy(c->prompt_id, pid, sizeof pid);
        }
        send_frame(c, 0x1, text, len);
    }
    free(text);
}

/* A type-1 preview (uint32 1, uint32 format, image) as ComfyUI's type 4
 * (uint32 4, uint32 head length, JSON head, image) for c; NULL when data is
 * not a type-1 frame or c has no node yet. */
static uint8_t *preview_with_metadata(const ws_conn *c, const uint8_t *data, size_t len,
                                      size_t *out_len)
{
    if (len < 8 || data[0] || data[1] || data[2] || data[3] != 1 || !c->node[0])
        return NULL;
    const bool png = data[7] == 2;
    cJSON *h = cJSON_CreateObject();
    cJSON_AddStringToObject(h, "node_id", c->node);
    cJSON_AddStringToObject(h, "display_node_id", c->node);
    cJSON_AddStringToObject(h, "real_node_id", c->node);
    cJSON_AddStringToObject(h, "prompt_id", c->prompt_id);
    cJSON_AddNullToObject(h, "parent_node_id");
    cJSON_AddStringToObject(h, "image_type", png ? "image/png" : "image/jpeg");
    char *head = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!head)
        return NULL;
    const size_t hl = strlen(head), n = 8 + hl + (len - 8);
    uint8_t *f = malloc(n);
    if (f) {
        const uint8_t pre[8] = {0, 0, 0, 4, (uint8_t)(hl >> 24), (uint8_t)(hl >> 16),
                                (uint8_t)(hl >> 8), (uint8_t)hl};
        memcpy(f, pre, 8);
        memcpy(f + 8, head, hl);
        memcpy(f + 8 + hl, data + 8, len - 8);
        *out_len = n;
    }
    free(head);
    return f;
}

void comfy_ws_send_binary(const char *sid, const char *owner, const void *data, size_t len)
{
    for (ws_conn *c = live, *next; c; c = next) {
        next = c->next;
        /* a preview is worth sending only to a socket that keeps up */
        if (!hears(c, sid, owner) || c->done || c->closing || waiting(c) != 0)
            continue;
        size_t n = 0;
        uint8_t *meta = c->preview_metadata ? preview_with_metadata(c, data, len, &n) : NULL;
        if (meta)
            send_frame(c, 0x2, meta, n);
        else
            send_frame(c, 0x2, data, len);
        free(meta);
    }
}

bool comfy_ws_idle(const char *sid, const char *owner)
{
    for (ws_conn *c = live; c; c = c->next)
        if (hears(c, sid, owner) && !c->done && !c->closing && waiting(c) == 0)
            return true;
    return false;
}

cJSON *comfy_status_data(const char *sid)
{
    cJSON *d = cJSON_CreateObject();
    cJSON *st = cJSON_AddObjectToObject(d, "status");
    cJSON *ei = cJSON_AddObjectToObject(st, "exec_info");
    cJSON_AddNumberToObject(ei, "queue_remaining", comfy_runs_pending());
    if (sid)
        cJSON_AddStringToObject(d, "sid", sid);
    return d;
}

void svc_comfy_ws_close_all(svc_server *s)
{
    (void)s;
    while (live)
        conn_end(live);
}

/* ---------------------------------------------------------- handshake */

bool comfy_ws_accept(const char *key, char out[29])
{
    char cat[64];
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (strlen(key) != 24)
        return false;
    snprintf(cat, sizeof cat, "%s%s", key, WS_GUID);
    if (!EVP_Digest(cat, strlen(cat), digest, &dlen, EVP_sha1(), NULL) || dlen != 20)
        return false;
    char *b64 = svc_base64_encode(digest, dlen);
    if (!b64 || strlen(b64) != 28) {
        free(b64);
        return false;
    }
    memcpy(out, b64, 29);
    free(b64);
    return true;
}

static bool header_has_token(const char *v, const char *token)
{
    size_t n = strlen(token);
    for (const char *p = v; p && *p;) {
        while (*p == ' ' || *p == ',' || *p == '\t')
            p++;
        if (strncasecmp(p, token, n) == 0 && (p[n] == '\0' || p[n] == ',' || p[n] == ' '))
            return true;
        p = strchr(p, ',');
    }
    return false;
}

/* clientId from the query: [A-Za-z0-9_-], 1..128; NULL: none. */
static bool client_id(const char *query, char *out, size_t size)
{
    out[0] = '\0';
    for (const char *p = query; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
        if (strncmp(p, "clientId=", 9) != 0)
            continue;
        const char *v = p + 9;
        size_t n = strcspn(v, "&");
        if (n == 0 || n >= size)
            return false;
        for (size_t i = 0; i < n; i++)
            if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') ||
                  (v[i] >= '0' && v[i] <= '9') || v[i] == '-' || v[i] == '_'))
                return false;
        memcpy(out, v, n);
        out[n] = '\0';
        return true;
    }
    return true;
}

/* GET /ws?clientId=ID: 101, then ComfyUI's messages for that id. */
void svc_comfy_ws(svc_req *r, const char *rest)
{
    (void)rest;
    svc_server *s = r->srv;
    const char *up = svc_req_header(r, "Upgrade"), *conn = svc_req_header(r, "Connection");
    const char *key = svc_req_header(r, "Sec-WebSocket-Key");
    const char *ver = svc_req_header(r, "Sec-WebSocket-Version");
    if (!up || strcasecmp(up, "websocket") != 0 || !conn || !header_has_token(conn, "upgrade")) {
        svc_req_add_header(r, "Upgrade", "websocket");
        svc_reply_errorf(r, r->dialect, 400, "upgrade_required", NULL,
                         "/ws is a websocket (Upgrade: websocket)");
        return;
    }
    if (!ver || strcmp(ver, "13") != 0) {
        svc_req_add_header(r, "Sec-WebSocket-Version", "13");
        svc_reply_errorf(r, r->dialect, 400, "invalid_request", NULL,
                         "Sec-WebSocket-Version must be 13");
        return;
    }
    uint8_t *raw = NULL;
    size_t raw_len = 0;
    char err[64];
    if (!key || strlen(key) != 24 || !svc_base64_decode(key, 24, &raw, &raw_len, err, sizeof err) ||
        raw_len != 16) {
        free(raw);
        svc_reply_errorf(r, r->dialect, 400, "invalid_request", NULL,
                         "Sec-WebSocket-Key must be 16 bytes in base64");
        return;
    }
    free(raw);
    char sid[129];
    if (!client_id(r->query, sid, sizeof sid)) {
        svc_reply_errorf(r, r->dialect, 400, "invalid_request", "clientId",
                         "clientId is 1..128 of [A-Za-z0-9_-]");
        return;
    }
    if (!sid[0]) /* ComfyUI makes one up when the client sends none */
        snprintf(sid, sizeof sid, "%016llx", (unsigned long long)(svc_now_mono() * 1e9));
    if (n_live >= WS_MAX_CONNS) {
        svc_reply_unavailable(r);
        return;
    }
    char accept[29];
    struct evhttp_connection *evcon = evhttp_request_get_connection(r->req);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    ws_conn *c = calloc(1, sizeof *c);
    /* from the 101 on, the head guard lets the frames through (http/guard.c) */
    if (!c || !bev || !comfy_ws_accept(key, accept) || !svc_guard_upgrade(bev) ||
        !(c->pending = evbuffer_new())) {
        free(c);
        svc_reply_errorf(r, r->dialect, 500, "internal", NULL,
                         "the connection cannot switch to a websocket (out of memory, or "
                         "another request is pipelined on it)");
        return;
    }
    c->srv = s;
    c->r = r;
    c->bev = bev;
    c->key = r->key;
    snprintf(c->sid, sizeof c->sid, "%s", sid);
    svc_req_add_header(r, "Upgrade", "websocket");
    svc_req_add_header(r, "Connection", "Upgrade");
    svc_req_add_header(r, "Sec-WebSocket-Accept", accept);
    evhttp_send_reply_start(r->req, 101, "Switching Protocols");
    c->next = live;
    if (live)
        live->prev = c;
    live = c;
    n_live++;
    svc_peer_watch(&c->peer, r, on_gone, c);
    /* the peer's EOF watch would stop at our first frame: evhttp's close
     * callback is the sign we keep (reading stays on, so EOF reaches it) */
    if (c->peer.watch) {
        event_free(c->peer.watch);
        c->peer.watch = NULL;
    }
    take_over(c);
    c->ping = event_new(s->base, -1, EV_PERSIST, on_ping, c);
    if (c->ping) {
        struct timeval tv = {WS_PING_S, 0};
        event_add(c->ping, &tv);
    }
    /* ComfyUI's greeting: the queue, and the session id */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "status");
    cJSON_AddItemToObject(o, "data", comfy_status_data(sid));
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (text)
        send_frame(c, 0x1, text, strlen(text));
    free(text);
}
