/*
 * tests/service/test_signed.c - the pieces of signed image URLs
 * (service/http/signed.c) that need no server: MD5 against RFC 1321's test
 * vectors, the signature against a vector computed outside Tessera (Python's
 * hashlib + base64url, the same string nginx's secure_link_md5 hashes), the
 * per-job expiry and its roll-forward, and the verdicts of svc_url_verify.
 *
 * Why a C unit test: MD5 is written in Tessera (service/base/md5.c), and a
 * wrong round constant would sign every URL in a way nginx refuses; the
 * vectors catch it at once and without a server.  The HTTP side (a signed
 * URL opens the image without a key, 403, 401) is test_signed_urls.py.
 */
#include <stdio.h>
#include <string.h>

#include "md5.h"
#include "signed.h"
#include "test.h"

static void hex(const uint8_t d[16], char out[33])
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static int test_md5_rfc1321(void)
{
    static const struct {
        const char *in, *want;
    } k[] = {
        {"", "d41d8cd98f00b204e9800998ecf8427e"},
        {"a", "0cc175b9c0f1b6a831c399e269772661"},
        {"abc", "900150983cd24fb0d6963f7d28e17f72"},
        {"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
        {"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"},
        {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
         "d174ab98d277d9f5a5611c2c9f419d9f"},
        {"1234567890123456789012345678901234567890123456789012345678901234567890123456789"
         "0",
         "57edf4a22be3c955ac49da2e2107b67a"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        uint8_t d[16];
        char h[33];
        svc_md5(k[i].in, strlen(k[i].in), d);
        hex(d, h);
        ASSERT_STR_EQ(h, k[i].want);
    }
    /* the lengths around the padding boundaries (one or two final blocks),
     * 'x' * n, vectors from Python's hashlib */
    static const struct {
        size_t n;
        const char *want;
    } pad[] = {{55, "04364420e25c512fd958a70738aa8f72"}, {56, "668a72d5ba17f08e62dabcafad6db14b"},
               {63, "7dc2ca208106a2f703567bdff99d8981"}, {64, "c1bb4f81d892b2d57947682aeb252456"},
               {65, "1bc932052302d074bdec39795fe00cf6"}, {119, "ab347a5f68c8a443cfcddc633f12c24f"},
               {120, "fb98667f98096de92620b64f46e1c5b5"}, {128, "d69cb61a6ee87200676eb0d4b90edbcb"}};
    char buf[200];
    memset(buf, 'x', sizeof buf);
    uint8_t a[16];
    char h[33];
    for (size_t i = 0; i < sizeof pad / sizeof pad[0]; i++) {
        svc_md5(buf, pad[i].n, a);
        hex(a, h);
        ASSERT_STR_EQ(h, pad[i].want);
    }
    svc_md5("The quick brown fox jumps over the lazy dog", 43, a);
    hex(a, h);
    ASSERT_STR_EQ(h, "9e107d9d372bb6826bd81d3542a419d6");
    return 0;
}

static svc_url_signer signer(long long ttl)
{
    svc_url_signer u;
    memset(&u, 0, sizeof u);
    u.on = true;
    snprintf(u.secret, sizeof u.secret, "0123456789abcdefghij");
    u.secret_len = strlen(u.secret);
    u.ttl = ttl;
    return u;
}

#define PNG "/v1/jobs/j_0123456789abcdef/images/0.png"

static int test_signature_vector(void)
{
    svc_url_signer u = signer(100);
    char sig[SVC_URL_SIG_LEN + 1];
    /* python3: base64.urlsafe_b64encode(hashlib.md5(b"2147483647" + PATH + b" " + SECRET)
     * .digest()).rstrip(b"=") */
    svc_url_signature(&u, PNG, "2147483647", sig);
    ASSERT_STR_EQ(sig, "aLg0smbYu4iXSIsR4WOnTQ");
    svc_url_signature(&u, "/v1/jobs/j_0123456789abcdef/images/0/tiles", "1100", sig);
    ASSERT_STR_EQ(sig, "5JGcGTJDprwZQQ0BXCQXkQ");
    return 0;
}

static int test_expiry_rolls_per_window(void)
{
    svc_url_signer u = signer(100);
    ASSERT_EQ(svc_url_expires(&u, 1000.7, 1000.9), 1100);
    ASSERT_EQ(svc_url_expires(&u, 1000, 1050), 1100);  /* half left: still this window */
    ASSERT_EQ(svc_url_expires(&u, 1000, 1050.9), 1100);
    ASSERT_EQ(svc_url_expires(&u, 1000, 1051), 1200);  /* under half: the next one */
    ASSERT_EQ(svc_url_expires(&u, 1000, 1150), 1200);
    ASSERT_EQ(svc_url_expires(&u, 1000, 1151), 1300);
    ASSERT_EQ(svc_url_expires(&u, 1000, 99999), 100100);
    for (long long now = 1000; now < 5000; now += 7) {
        long long e = svc_url_expires(&u, 1000, (double)now);
        ASSERT_TRUE(e - now >= 50 && e - now <= 150 && (e - 1000) % 100 == 0);
    }
    u.ttl = 1;
    ASSERT_TRUE(svc_url_expires(&u, 1000, 1000) >= 1001);
    return 0;
}

static int test_verify(void)
{
    svc_url_signer u = signer(100);
    char url[256], q[256];
    svc_url_signer off = u;
    off.on = false;
    svc_url_format(&off, PNG, 1000, url, sizeof url);
    ASSERT_STR_EQ(url, PNG);
    char sig[SVC_URL_SIG_LEN + 1];
    svc_url_signature(&u, PNG, "5000", sig);
    long long e = 0;
    snprintf(q, sizeof q, "md5=%s&expires=5000", sig);
    ASSERT_EQ(svc_url_verify(&u, PNG, q, 4000, &e), SVC_URL_OK);
    ASSERT_EQ(e, 5000);
    ASSERT_EQ(svc_url_verify(&u, PNG, q, 5000.5, &e), SVC_URL_OK); /* nginx: expires >= now */
    ASSERT_EQ(svc_url_verify(&u, PNG, q, 5001, &e), SVC_URL_EXPIRED);
    ASSERT_EQ(e, 0);
    /* names case-insensitive, either order, other arguments ignored */
    snprintf(q, sizeof q, "x=1&EXPIRES=5000&Md5=%s", sig);
    ASSERT_EQ(svc_url_verify(&u, PNG, q, 4000, &e), SVC_URL_OK);
    /* another path, expiry, secret, a flipped character: bad */
    ASSERT_EQ(svc_url_verify(&u, "/v1/jobs/j_0123456789abcdef/images/1.png",
                             "md5=aLg0smbYu4iXSIsR4WOnTQ&expires=2147483647", 4000, &e),
              SVC_URL_BAD);
    snprintf(q, sizeof q, "md5=%s&expires=5001", sig);
    ASSERT_EQ(svc_url_verify(&u, PNG, q, 4000, &e), SVC_URL_BAD);
    svc_url_signer other = signer(100);
    other.secret[0] = 'X';
    snprintf(q, sizeof q, "md5=%s&expires=5000", sig);
    ASSERT_EQ(svc_url_verify(&other, PNG, q, 4000, &e), SVC_URL_BAD);
    char flipped[SVC_URL_SIG_LEN + 1];
    memcpy(flipped, sig, sizeof flipped);
    flipped[3] = flipped[3] == 'A' ? 'B' : 'A';
    snprintf(q, sizeof q, "md5=%s&expires=5000", flipped);
    ASSERT_EQ(svc_url_verify(&u, PNG, q, 4000, &e), SVC_URL_BAD);
    /* unsigned; half a signature; repeated; malformed expiry */
    ASSERT_EQ(svc_url_verify(&u, PNG, NULL, 4000, &e), SVC_URL_UNSIGNED);
    ASSERT_EQ(svc_url_verify(&u, PNG, "v=2", 4000, &e), SVC_URL_UNSIGNED);
    ASSERT_EQ(svc_url_verify(&u, PNG, "expires=5000", 4000, &e), SVC_URL_BAD);
    snprintf(q, sizeof q, "md5=%s", sig);
    ASSERT_EQ(svc_url_verify(&u, PNG, q, 4000, &e), SVC_URL_BAD);
    snprintf(q, sizeof q, "md5=%s&expires=5000&md5=%s", sig, sig);
    ASSERT_EQ(svc_url_verify(&u, PNG, q, 4000, &e), SVC_URL_BAD);
    snprintf(q, sizeof q, "md5=%s&expires=5e3", sig);
    ASSERT_EQ(svc_url_verify(&u, PNG, q, 4000, &e), SVC_URL_BAD);
    /* what svc_url_format writes, svc_url_verify takes */
    svc_url_format(&u, PNG, 1000, url, sizeof url);
    const char *qm = strchr(url, '?');
    ASSERT_TRUE(qm && strncmp(url, PNG, (size_t)(qm - url)) == 0);
    ASSERT_EQ(svc_url_verify(&u, PNG, qm + 1, 1000, &e), SVC_URL_OK);
    return 0;
}

static const tsr_test_entry tests[] = {
    {"md5_rfc1321", test_md5_rfc1321},
    {"signature_vector", test_signature_vector},
    {"expiry_rolls_per_window", test_expiry_rolls_per_window},
    {"verify", test_verify},
};

TSR_TEST_TABLE_MAIN(tests)
