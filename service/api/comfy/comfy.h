/*
 * service/api/comfy/comfy.h - ComfyUI's API on Tessera (issue 59,
 * docs/compat-comfyui.md): the node table, the workflow compiler, the
 * routes.
 *
 * Why a compiler and not an executor: ComfyUI runs a graph node by node;
 * Tessera runs images, step-batched with every other request.  A workflow
 * ("API format": {"<id>": {"class_type", "inputs": {name: value |
 * ["<id>", output_index]}}}) is therefore validated as a whole and
 * compiled into native job objects (the body POST /v1/jobs takes), one
 * per sampled chain, which then go through the same submit gate, journal,
 * queue and store as every other dialect's work, accepted together.
 * Nothing runs half a graph: a workflow is refused before anything is
 * queued, with ComfyUI's error shape naming the node id and class.
 *
 * The node classes are data (comfy_nodes.c): one table of classes with
 * their inputs, types, defaults and ranges, which the validator checks
 * against and GET /object_info renders.
 */
#ifndef SVC_COMFY_H
#define SVC_COMFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* Bounds on a workflow (a body is refused past them; docs/compat-comfyui.md). */
#define COMFY_MAX_NODES 256      /* nodes in one prompt */
#define COMFY_MAX_ID 64          /* bytes of a node id */
#define COMFY_MAX_TEXT 65536     /* bytes of a string input (= a native prompt's bound) */
#define COMFY_MAX_DEPTH 64       /* links on the longest path from an output */

/* The kinds of value an input or output carries (ComfyUI's type names). */
typedef enum comfy_type {
    CT_INT, CT_FLOAT, CT_STRING, CT_BOOLEAN, CT_COMBO, /* widgets: literal values */
    CT_MODEL, CT_CLIP, CT_VAE, CT_CONDITIONING, CT_LATENT, CT_IMAGE, CT_MASK, /* links */
    CT_COUNT
} comfy_type;

/* Where a COMBO's choices come from. */
typedef enum comfy_choices {
    CC_NONE, CC_CHECKPOINTS, CC_SAMPLERS, CC_SCHEDULERS, CC_UPSCALE, CC_IMAGE_UPSCALE, CC_CROP,
    CC_IMAGE_CROP, CC_ENABLE,
    CC_IMAGES, CC_LORAS,
} comfy_choices;

typedef struct comfy_input {
    const char *name;
    comfy_type type;
    double def, min, max, step; /* INT / FLOAT */
    const char *sdef;           /* STRING default; NULL none */
    bool multiline;             /* STRING */
    comfy_choices choices;      /* COMBO */
    bool optional;
} comfy_input;

#define COMFY_MAX_INPUTS 14
#define COMFY_MAX_OUTPUTS 3

typedef struct comfy_class {
    const char *name;           /* "KSampler" */
    const char *display;        /* "KSampler" */
    const char *category;       /* "sampling" */
    const char *description;
    comfy_input inputs[COMFY_MAX_INPUTS];
    comfy_type outputs[COMFY_MAX_OUTPUTS];
    const char *output_names[COMFY_MAX_OUTPUTS];
    int n_outputs;
    bool output_node;           /* SaveImage, PreviewImage */
} comfy_class;

/* What the compiler and /object_info need from the server: the names a
 * COMBO accepts (NULL-terminated lists, borrowed), and LoadImage's files. */
typedef struct comfy_context {
    const char *const *checkpoints; /* the loaded model's name(s) */
    const char *const *loras;       /* LoRA names (NULL: LoraLoader refuses every name) */
    const char *const *images;      /* input images /upload/image stored (may be NULL) */
    /* LoadImage: the file's bytes as a base64 string (malloc'd) or NULL
     * with err filled; NULL callback: LoadImage refuses every name */
    char *(*load_image)(void *user, const char *name, char *err, size_t err_size);
    /* LoadImage's MASK: 255 - the file's alpha as a gray PNG, base64
     * (malloc'd), or NULL with err (NULL callback: refused) */
    char *(*load_mask)(void *user, const char *name, char *err, size_t err_size);
    void *user;
} comfy_context;

/* The class named `name`, or NULL. */
const comfy_class *comfy_class_find(const char *name);
/* The table (returns the count). */
int comfy_classes(const comfy_class **out);
const char *comfy_type_name(comfy_type t);
/* ComfyUI's sampler / scheduler / upscale names: the list (NULL-terminated)
 * and Tessera's name for one (NULL when not mapped). */
const char *const *comfy_choice_list(comfy_choices c, const comfy_context *ctx);
const char *comfy_sampler_to_tessera(const char *comfy);
/* The schedule for ComfyUI's scheduler `comfy` with Tessera's sampler
 * `sampler`: the ComfyUI-exact comfy_* one where the sampler takes it, else
 * diffusers' nearest (normal -> default, ...) or, with none, the comfy_* name
 * (which the engine then refuses for that sampler). */
const char *comfy_scheduler_to_tessera(const char *sampler, const char *comfy);
const char *comfy_upscale_to_tessera(const char *comfy);
/* ImageScale's upscale_method -> the engine's image-space hires upscaler
 * ("Lanczos", "Nearest"), NULL for the methods it has no path for. */
const char *comfy_image_upscale_to_tessera(const char *comfy);
/* GET /object_info[/{class}]: every class (name NULL) or one (NULL if unknown). */
cJSON *comfy_object_info(const comfy_context *ctx, const char *name);

/* ImageScale / ImageScaleBy (comfy_scale.c): ComfyUI's common_upscale. */
#define COMFY_SCALE_MAX 4096     /* a scaled side, at most */
#define COMFY_MAX_SCALES 4       /* ImageScale(By) nodes in a row */
typedef enum comfy_scale_method {
    CS_NEAREST_EXACT, CS_BILINEAR, CS_AREA, CS_BICUBIC, CS_LANCZOS
} comfy_scale_method;
typedef struct comfy_scale {
    comfy_scale_method method;
    int width, height;          /* ImageScale (0 = from the other side's ratio; both 0: as is) */
    double scale_by;            /* ImageScaleBy when > 0 (width, height unused) */
    bool crop_center;           /* ImageScale's crop "center" */
    char node[COMFY_MAX_ID + 1]; /* the node, for errors */
} comfy_scale;
/* The method named `name` (ComfyUI's upscale_method), or -1. */
int comfy_scale_method_of(const char *name);
const char *comfy_scale_method_name(comfy_scale_method m);
/* The size op gives a w x h image (ComfyUI's rounding); false outside
 * 1..COMFY_SCALE_MAX. */
bool comfy_scale_size(const comfy_scale *op, int w, int h, int *ow, int *oh);
/* One op on a float image (channels last, c channels): *out malloc'd. */
int comfy_scale_apply(const float *in, int w, int h, int c, const comfy_scale *op, float **out,
                      int *ow, int *oh, char *err, size_t err_size);
/* An 8-bit RGB image through ops, read as ComfyUI's LoadImage reads it;
 * out as SaveImage writes it (save: truncated) or rounded (VAEEncode's
 * pixels).  *out malloc'd. */
int comfy_scale_rgb(const uint8_t *rgb, int w, int h, const comfy_scale *ops, int n, bool save,
                    uint8_t **out, int *ow, int *oh, char *err, size_t err_size);

/* A compiled workflow: one native job per sampled chain (KSampler ->
 * VAEDecode -> [ImageScale...] -> SaveImage/PreviewImage), all accepted
 * together or none. */
#define COMFY_MAX_CHAINS 4       /* sampled chains (native jobs) in one prompt */
#define COMFY_MAX_OUT_NODES 8    /* SaveImage / PreviewImage nodes in one prompt */

typedef struct comfy_chain {
    cJSON *job;                 /* the native job object (owned) */
    char sampler_node[COMFY_MAX_ID + 1]; /* its (last) KSampler: `progress` names it */
    /* which node set each native field, so an engine refusal names it */
    struct {
        const char *field;
        char node[COMFY_MAX_ID + 1];
        const char *class_type;
        const char *input;
    } fields[24];
    int n_fields;
} comfy_chain;

typedef struct comfy_output {
    char node[COMFY_MAX_ID + 1]; /* the SaveImage / PreviewImage node */
    bool temp;                  /* PreviewImage: type "temp" */
    int chain;                  /* the chain (job) whose images it saves */
    comfy_scale scales[COMFY_MAX_SCALES]; /* ImageScale(By) between VAEDecode and it, in order */
    int n_scales;
} comfy_output;

typedef struct comfy_plan {
    comfy_chain chains[COMFY_MAX_CHAINS];
    int n_chains;
    comfy_output outputs[COMFY_MAX_OUT_NODES]; /* in id order */
    int n_outputs;
    char *order[COMFY_MAX_NODES];        /* the executed nodes, dependencies first (owned) */
    const char *order_class[COMFY_MAX_NODES]; /* their class names (static) */
    unsigned char order_chains[COMFY_MAX_NODES]; /* bit c: chain c needs the node */
    int n_order;
} comfy_plan;

void comfy_plan_free(comfy_plan *p);

/* Validate `prompt` (the workflow object) and compile it.  0 with *plan
 * filled, or -1 with *error the body of ComfyUI's 400 ({"error": {...},
 * "node_errors": {...}}, owned).  Never modifies prompt. */
int comfy_compile(const cJSON *prompt, const comfy_context *ctx, comfy_plan *plan,
                  cJSON **error);

/* The 400 body for a native field the engine refused in chain c's job
 * (svc_gate_parse's field and message), naming the node that set it (owned). */
cJSON *comfy_field_error(const comfy_plan *p, int c, const char *field, const char *message);
/* The 400 body when an output of chain c scales its width x height image
 * past 1..COMFY_SCALE_MAX on a side (naming the ImageScale node), else NULL. */
cJSON *comfy_check_output_sizes(const comfy_plan *p, int c, int width, int height);
/* A ComfyUI error body with no node errors: {"error": {type, message,
 * details, extra_info: {}}, "node_errors": {}} (owned). */
cJSON *comfy_error_body(const char *type, const char *message, const char *details);

/* ---- routes (comfy_routes.c, comfy_view.c, comfy_info.c, comfy_ws.c; in
 * http/router.c's table) ---- */
struct svc_req;
struct svc_server;
struct svc_job;
/* An uploaded image's name or subfolder: [A-Za-z0-9._-], 1..128 bytes, not
 * starting with '.' (comfy_routes.c). */
bool comfy_safe_name(const char *n);
/* <data-dir>/comfy/<sub> into buf (comfy_routes.c). */
void comfy_dir(struct svc_server *s, const char *sub, char *buf, size_t size);
/* A prompt's job (prompt_id = "j_...") when r's key sees it, else NULL. */
struct svc_job *comfy_find_job(struct svc_req *r, const char *ids);
/* Query value `name` of `query`, decoded ('+' = space), into buf ("" when
 * absent); false when longer than size - 1 or 511 bytes, or undecodable
 * (comfy_view.c). */
bool comfy_query_get(const char *query, const char *name, char *buf, size_t size);
/* A path under one of ComfyUI's roots (/prompt, /history, ...): keys apply. */
bool svc_comfy_is_path(const char *path);
void svc_comfy_prompt(struct svc_req *r, const char *rest);
void svc_comfy_history(struct svc_req *r, const char *rest);
void svc_comfy_view(struct svc_req *r, const char *rest);
void svc_comfy_queue(struct svc_req *r, const char *rest);
void svc_comfy_interrupt(struct svc_req *r, const char *rest);
void svc_comfy_object_info(struct svc_req *r, const char *rest);
void svc_comfy_system_stats(struct svc_req *r, const char *rest);
void svc_comfy_list(struct svc_req *r, const char *rest);
void svc_comfy_models(struct svc_req *r, const char *rest);
void svc_comfy_upload_image(struct svc_req *r, const char *rest);
void svc_comfy_ws(struct svc_req *r, const char *rest);

/* ---- a prompt's file, jobs, state and names (comfy_prompt.c) ---- */
/* <data-dir>/comfy/prompts/<jobs[0]>.json: the workflow, client_id (NULL:
 * none), the plan's outputs and order, the jobs' ids, number.  0 or -1. */
int comfy_prompt_write(struct svc_server *s, struct svc_job *const *jobs, int n,
                       const cJSON *prompt, const char *client_id, const comfy_plan *plan,
                       double number);
/* The prompt file of prompt id `ids` (owned), NULL if none. */
cJSON *comfy_prompt_read(struct svc_server *s, const char *ids);
int comfy_prompt_remove(struct svc_server *s, const char *ids);
/* Between the file's write and the accept's end: the prompt's file stays
 * while its job is not in the table yet. */
void comfy_prompt_inflight(uint64_t id, bool on);
/* Output k of a prompt file (false: none, or a damaged entry). */
bool comfy_prompt_output(const cJSON *pf, int k, comfy_output *out);
/* The prompt's jobs, chain by chain, into jobs[COMFY_MAX_CHAINS] (NULL: a
 * job that is gone); returns how many.  first: the prompt id's job. */
int comfy_prompt_jobs(struct svc_server *s, struct svc_job *first, const cJSON *pf,
                      struct svc_job **jobs);
/* The prompt's state from its jobs' (an svc_state). */
int comfy_prompt_state(struct svc_job *const *jobs, int n);
/* Its first start and last end (unix seconds, 0 = none yet), and why it
 * failed (a job's message, or a gone job; NULL: no reason known). */
void comfy_prompt_times(struct svc_job *const *jobs, int n, double *started, double *finished,
                        const char **why);
/* Output k's images as ComfyUI lists them ({filename, subfolder, type}),
 * from its chain's job j (the done images). */
cJSON *comfy_output_images(const char *prompt_id, int k, const comfy_output *out,
                           const struct svc_job *j);
/* An output image's name: the job id (ids), the image index, and the
 * output's place for a scaled output (else -1). */
bool comfy_output_name_parse(const char *name, char ids[20], int *index, int *output);
/* Each prompt whose first job r's key sees, oldest first, with its jobs
 * and file; fn says whether to go on.  Files whose job is gone are removed
 * on the way (see comfy_prompt.c). */
typedef bool (*comfy_prompt_fn)(struct svc_req *r, struct svc_job **jobs, int n, cJSON *pf,
                                void *u);
void comfy_prompts_each(struct svc_req *r, comfy_prompt_fn fn, void *u);

/* ---- the websocket (comfy_ws.c) and the runs it reports (comfy_run.c) ---- */
struct svc_server;
struct svc_job;
/* A ComfyUI message {"type", "data"} (data taken) to the sockets of client
 * id sid (NULL: every socket) whose key sees prompts of owner (NULL: any). */
void comfy_ws_send(const char *sid, const char *owner, const char *type, cJSON *data);
/* A binary frame, only to sockets with nothing waiting (previews). */
void comfy_ws_send_binary(const char *sid, const char *owner, const void *data, size_t len);
/* Whether a socket of sid that hears owner's prompts has nothing waiting
 * (a preview is worth making). */
bool comfy_ws_idle(const char *sid, const char *owner);
/* Open sockets of sid (NULL: all). */
int comfy_ws_clients(const char *sid);
/* "status"'s data: {"status": {"exec_info": {"queue_remaining"}}, "sid"?}. */
cJSON *comfy_status_data(const char *sid);
/* Sec-WebSocket-Accept for a 24-character Sec-WebSocket-Key (RFC 6455 4.2.2):
 * base64(SHA-1(key + the RFC's GUID)) into out; false for a bad key. */
bool comfy_ws_accept(const char *key, char out[29]);
/* Shutdown: close every socket. */
void svc_comfy_ws_close_all(struct svc_server *s);
/* A prompt's run: what its messages need from the plan (owned; built
 * before the accept, so the plan can go).  sid "" or NULL: every socket;
 * previews: send binary preview frames (extra_data.preview_method). */
typedef struct comfy_run comfy_run;
comfy_run *comfy_run_new(const comfy_plan *plan, const char *sid, bool previews);
/* Accepted: follow the jobs (one per chain, in the plan's order) and tell
 * the client id's sockets (execution_start ... execution_success); the run
 * frees itself when the prompt ends. */
void comfy_run_attach(struct svc_server *s, comfy_run *run, struct svc_job *const *jobs, int n);
/* Not accepted. */
void comfy_run_free(comfy_run *run);
/* Prompts accepted here and not final yet (queue_remaining). */
int comfy_runs_pending(void);

#endif
