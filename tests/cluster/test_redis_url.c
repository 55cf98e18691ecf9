/*
 * tests/cluster/test_redis_url.c - the --queue URL parser
 * (service/queue/redis/redis_url.c), the password's sources
 * (redis_conn.c: file, environment) and the redaction of a typed password.
 *
 * Why a C unit test next to the fuzzer: fuzz/fuzz_redis_url.c proves no
 * input crashes it; this table states what each URL form means (rediss://
 * is TLS, USER@ is an ACL user, a password in the URL is refused with a
 * message that points at the file or the environment) and that no refusal
 * message ever carries the password.  The Redis side of the same rules is
 * tests/cluster/test_secure.py.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "redis_conn.h"
#include "redis_url.h"
#include "service.h"
#include "test.h"

typedef struct {
    const char *url;
    bool ok;
    const char *host, *user;
    int port, db;
    bool tls;
    const char *msg; /* a part of the refusal */
} url_case;

static const url_case k_urls[] = {
    {"redis://127.0.0.1:6379/0", true, "127.0.0.1", "", 6379, 0, false, NULL},
    {"redis://h", true, "h", "", 6379, 0, false, NULL},
    {"rediss://redis.example.com:6380/2", true, "redis.example.com", "", 6380, 2, true, NULL},
    {"rediss://h", true, "h", "", 6379, 0, true, NULL},
    {"redis://tsr@h:7000", true, "h", "tsr", 7000, 0, false, NULL},
    {"rediss://svc.user-1_x~@[::1]:7001/3", true, "::1", "svc.user-1_x~", 7001, 3, true, NULL},
    {"redis://:secret@h", false, NULL, NULL, 0, 0, false, "a password in the URL is not accepted"},
    {"redis://u:secret@h/1", false, NULL, NULL, 0, 0, false, "--queue-password-file"},
    {"rediss://u:p@ss@h", false, NULL, NULL, 0, 0, false, "TESSERA_REDIS_PASSWORD"},
    {"redis://u:pa/ss@h", false, NULL, NULL, 0, 0, false, "a password in the URL"},
    {"redis://@h", false, NULL, NULL, 0, 0, false, "the user name before '@' is empty"},
    {"redis://u v@h", false, NULL, NULL, 0, 0, false, "character not allowed"},
    {"redis://u%41@h", false, NULL, NULL, 0, 0, false, "character not allowed"},
    {"redis://u@", false, NULL, NULL, 0, 0, false, "the host is missing"},
    {"http://h", false, NULL, NULL, 0, 0, false, "redis:// or rediss://"},
    {"redisss://h", false, NULL, NULL, 0, 0, false, "redis:// or rediss://"},
    {"unix:///tmp/redis.sock", false, NULL, NULL, 0, 0, false, "unix sockets"},
    {"rediss://h:0", false, NULL, NULL, 0, 0, false, "1..65535"},
    {"redis://h/x", false, NULL, NULL, 0, 0, false, "database"},
    {"redis://h?ssl=true", false, NULL, NULL, 0, 0, false, "query strings"},
};

static int test_url_table(void)
{
    for (size_t i = 0; i < sizeof k_urls / sizeof k_urls[0]; i++) {
        const url_case *c = &k_urls[i];
        svc_redis_url u;
        char err[300] = "";
        int rc = svc_redis_url_parse(c->url, &u, err, sizeof err);
        if ((rc == 0) != c->ok)
            TSR_FAIL("%s: parsed %s (%s)", c->url, rc == 0 ? "ok" : "refused", err);
        if (c->ok) {
            ASSERT_STR_EQ(u.host, c->host);
            ASSERT_STR_EQ(u.user, c->user);
            ASSERT_EQ(u.port, c->port);
            ASSERT_EQ(u.db, c->db);
            ASSERT_EQ(u.tls, c->tls);
            ASSERT_EQ(u.password[0], 0);
        } else {
            if (!strstr(err, c->msg))
                TSR_FAIL("%s: the message '%s' lacks '%s'", c->url, err, c->msg);
            if (strstr(err, "secret") || strstr(err, "p@ss") || strstr(err, "pa/ss"))
                TSR_FAIL("%s: the message shows the password: %s", c->url, err);
        }
    }
    return 0;
}

/* The CLI's check echoes the URL with the password replaced. */
static int test_redacted_in_messages(void)
{
    char err[400];
    ASSERT_EQ(tsr_service_check_queue_url("redis://bob:hunter2@h:1/0", err, sizeof err), -1);
    ASSERT_TRUE(strstr(err, "redis://bob:***@h:1/0") != NULL);
    ASSERT_TRUE(strstr(err, "hunter2") == NULL);
    ASSERT_EQ(tsr_service_check_queue_url("rediss://:a@b@h", err, sizeof err), -1);
    ASSERT_TRUE(strstr(err, "rediss://:***@h") != NULL);
    ASSERT_EQ(tsr_service_check_queue_url("rediss://bob@h:6380", err, sizeof err), 0);
    char shown[100];
    svc_redis_url_redact("redis://bob@h", shown, sizeof shown);
    ASSERT_STR_EQ(shown, "redis://bob@h");
    return 0;
}

static const char *write_tmp(const char *bytes, size_t n, char *path, size_t size)
{
    snprintf(path, size, "/tmp/tsr-redis-pw-%d-XXXXXX", (int)getpid());
    int fd = mkstemp(path);
    if (fd < 0)
        return NULL;
    ssize_t w = write(fd, bytes, n);
    close(fd);
    return w == (ssize_t)n ? path : NULL;
}

static int test_password_sources(void)
{
    char pw[512], err[300], path[64];
    /* one trailing newline (or CRLF) stripped, spaces kept */
    static const struct {
        const char *bytes;
        const char *want; /* NULL: refused */
    } files[] = {
        {"s3cret\n", "s3cret"},  {"s3cret", "s3cret"},     {"a b \r\n", "a b "},
        {"x\n\n", NULL},         {"two\nlines\n", NULL},   {"\n", NULL},
        {"", NULL},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        ASSERT_TRUE(write_tmp(files[i].bytes, strlen(files[i].bytes), path, sizeof path));
        chmod(path, 0600);
        int rc = svc_redis_password_load(path, pw, sizeof pw, err, sizeof err);
        unlink(path);
        if (files[i].want) {
            if (rc != 0)
                TSR_FAIL("file %zu refused: %s", i, err);
            ASSERT_STR_EQ(pw, files[i].want);
        } else {
            ASSERT_EQ(rc, -1);
            ASSERT_TRUE(strstr(err, "--queue-password-file") != NULL);
        }
    }
    /* a NUL inside */
    ASSERT_TRUE(write_tmp("a\0b\n", 4, path, sizeof path));
    ASSERT_EQ(svc_redis_password_load(path, pw, sizeof pw, err, sizeof err), -1);
    unlink(path);
    /* too long for the buffer */
    char big[600];
    memset(big, 'x', sizeof big);
    ASSERT_TRUE(write_tmp(big, sizeof big, path, sizeof path));
    ASSERT_EQ(svc_redis_password_load(path, pw, sizeof pw, err, sizeof err), -1);
    unlink(path);
    ASSERT_EQ(svc_redis_password_load("/nonexistent/pw", pw, sizeof pw, err, sizeof err), -1);
    ASSERT_TRUE(strstr(err, "/nonexistent/pw") != NULL);
    /* no file: the environment, or nothing */
    unsetenv("TESSERA_REDIS_PASSWORD");
    ASSERT_EQ(svc_redis_password_load(NULL, pw, sizeof pw, err, sizeof err), 0);
    ASSERT_STR_EQ(pw, "");
    setenv("TESSERA_REDIS_PASSWORD", "from env", 1);
    ASSERT_EQ(svc_redis_password_load(NULL, pw, sizeof pw, err, sizeof err), 0);
    ASSERT_STR_EQ(pw, "from env");
    setenv("TESSERA_REDIS_PASSWORD", "a\nb", 1);
    ASSERT_EQ(svc_redis_password_load(NULL, pw, sizeof pw, err, sizeof err), -1);
    ASSERT_TRUE(strstr(err, "a\nb") == NULL);
    unsetenv("TESSERA_REDIS_PASSWORD");
    return 0;
}

/* svc_redis_target: the rules between the URL, the CA and the password. */
static int test_target_rules(void)
{
    svc_redis_url u;
    char err[400];
    unsetenv("TESSERA_REDIS_PASSWORD");
    ASSERT_EQ(svc_redis_target("redis://h", NULL, "/etc/hostname", &u, err, sizeof err), -1);
    ASSERT_TRUE(strstr(err, "--queue-ca needs a rediss://") != NULL);
    ASSERT_EQ(svc_redis_target("rediss://h", NULL, "/nonexistent/ca.pem", &u, err, sizeof err),
              -1);
    ASSERT_TRUE(strstr(err, "/nonexistent/ca.pem") != NULL);
    ASSERT_EQ(svc_redis_target("redis://tsr@h", NULL, NULL, &u, err, sizeof err), -1);
    ASSERT_TRUE(strstr(err, "no password was given") != NULL);
    setenv("TESSERA_REDIS_PASSWORD", "pw", 1);
    ASSERT_EQ(svc_redis_target("redis://tsr@h", NULL, NULL, &u, err, sizeof err), 0);
    ASSERT_STR_EQ(u.user, "tsr");
    ASSERT_STR_EQ(u.password, "pw");
    svc_redis_url_wipe(&u);
    ASSERT_EQ(u.password[0], 0);
    unsetenv("TESSERA_REDIS_PASSWORD");
    return 0;
}

static const tsr_test_entry tests[] = {
    {"url_table", test_url_table},
    {"redacted_in_messages", test_redacted_in_messages},
    {"password_sources", test_password_sources},
    {"target_rules", test_target_rules},
};

TSR_TEST_TABLE_MAIN(tests)
