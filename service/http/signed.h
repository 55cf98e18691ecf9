/*
 * service/http/signed.h - signed image URLs (issue 62): with keys on, every
 * image, tile and manifest URL the server hands out carries
 * `?md5=SIG&expires=EPOCH` in the format of nginx's secure_link module, so
 * that an `<img>` tag or a CDN can fetch it without a key, and nginx can
 * check it at the edge (deploy/nginx/tessera.conf) with
 *
 *     secure_link $arg_md5,$arg_expires;
 *     secure_link_md5 "$secure_link_expires$uri $tessera_url_secret";
 *
 * SIG is base64url, without padding, of the binary MD5 of
 * "<expires><path> <secret>".  The secret is shared by the server and nginx:
 * --url-secret-file FILE, else <data-dir>/url-secret (made once from
 * getrandom, 0600).  Either way the server writes <data-dir>/url-secret.nginx
 * (`set $tessera_url_secret "...";`, 0600) for nginx to `include`, so the
 * two cannot drift apart.  Only base64 characters are allowed in a secret,
 * since it is pasted into nginx's configuration as a literal.
 *
 * Why the expiry is per job and not per request: every viewer of one job
 * must get the same URL, or a CDN would cache each image once per viewer.
 * expires = created + ttl, rolled forward in whole ttl steps while less than
 * half a ttl is left, so a URL handed out stays valid at least ttl/2 and at
 * most 1.5 ttl, and all viewers in one window share it
 * (docs/security.md, "Signed URLs").
 */
#ifndef SVC_SIGNED_H
#define SVC_SIGNED_H

#include <stdbool.h>
#include <stddef.h>

#define SVC_URL_SECRET_MIN 16  /* characters, at least (96 bits of base64) */
#define SVC_URL_SECRET_MAX 256
#define SVC_URL_SIG_LEN 22     /* base64url of 16 bytes, no padding */

typedef struct svc_url_signer {
    bool on;          /* keys on: URLs are signed and signatures checked */
    char secret[SVC_URL_SECRET_MAX + 1];
    size_t secret_len;
    long long ttl;    /* --url-ttl, seconds */
} svc_url_signer;

/* Read a secret file: one line of SVC_URL_SECRET_MIN..MAX base64 characters
 * (A-Z a-z 0-9 + / = - _), not readable by others (group: a warning when
 * warn).  0, or -1 with the reason in err. */
int svc_url_secret_read(const char *flag, const char *path, bool warn, char *secret,
                        size_t *len, char *err, size_t err_size);
/* Turn signing on: the secret from secret_file, else <data_dir>/url-secret
 * (made when missing); writes <data_dir>/url-secret.nginx and logs both
 * paths.  0, or -1 with the reason in err. */
int svc_url_signer_start(svc_url_signer *u, const char *secret_file, const char *data_dir,
                         long long ttl, char *err, size_t err_size);
/* The expiry of a job's URLs at `now` (both Unix seconds). */
long long svc_url_expires(const svc_url_signer *u, double created, double now);
/* SIG for path and expires (its decimal text, as nginx hashes it). */
void svc_url_signature(const svc_url_signer *u, const char *path, const char *expires,
                       char sig[SVC_URL_SIG_LEN + 1]);
/* The URL of path for a job created at `created`: path itself when signing
 * is off, else path?md5=SIG&expires=EPOCH.  The one place URLs are signed. */
void svc_url_format(const svc_url_signer *u, const char *path, double created, char *buf,
                    size_t size);

typedef enum svc_url_verdict {
    SVC_URL_UNSIGNED, /* neither md5 nor expires in the query */
    SVC_URL_OK,       /* a valid signature, not expired */
    SVC_URL_BAD,      /* tampered, malformed, or only one of the two */
    SVC_URL_EXPIRED,  /* a valid signature past its expiry */
} svc_url_verdict;
/* Judge the signature of a request for path with query (may be NULL) at
 * `now`.  Argument names match case-insensitively, as nginx's $arg_ does;
 * the signature is compared in constant time.  *expires: the URL's
 * expiry when SVC_URL_OK, else 0. */
svc_url_verdict svc_url_verify(const svc_url_signer *u, const char *path, const char *query,
                               double now, long long *expires);

#endif
