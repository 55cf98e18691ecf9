/*
 * tests/test.c - the harness behind test.h.
 */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tessera.h"

int tsr_test_main(int argc, char **argv, const tsr_test_entry *table, size_t n)
{
    int failed = 0, ran = 0, skipped = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc >= 2) {
            bool selected = false;
            for (int a = 1; a < argc; a++)
                if (strcmp(argv[a], table[i].name) == 0)
                    selected = true;
            if (!selected)
                continue;
        }
        ran++;
        int rc = table[i].fn();
        printf("%s %s\n", rc == TSR_TEST_SKIP ? "skip" : rc ? "FAIL" : "ok  ", table[i].name);
        fflush(stdout);
        skipped += rc == TSR_TEST_SKIP;
        failed += rc != 0 && rc != TSR_TEST_SKIP;
    }
    if (ran == 0) {
        fprintf(stderr, "no test case matched\n");
        return 2;
    }
    if (failed)
        return 1;
    return skipped == ran ? TSR_TEST_SKIP : 0; /* ctest: SKIP_RETURN_CODE 77 */
}

const char *tsr_test_path(const char *rel, char *buf, size_t size)
{
    const char *root = getenv("TSR_TEST_DATA");
    snprintf(buf, size, "%s/%s", root ? root : "tests/data", rel);
    return buf;
}

void *tsr_test_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long len = ftell(f);
    rewind(f);
    void *buf = malloc(len > 0 ? (size_t)len : 1);
    if (buf && len > 0 && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf && size)
        *size = (size_t)len;
    return buf;
}

int tsr_test_check_close(const char *what, const float *got, const float *want, size_t n,
                         double tol)
{
    double ref_max = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(want[i]) > ref_max)
            ref_max = fabs(want[i]);
    if (ref_max < 1e-30)
        ref_max = 1e-30;
    double worst = 0;
    size_t worst_i = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            fprintf(stderr, "%s: non-finite value %g at %zu\n", what, got[i], i);
            return 1;
        }
        double err = fabs((double)got[i] - (double)want[i]) / ref_max;
        if (err > worst) {
            worst = err;
            worst_i = i;
        }
    }
    if (worst > tol) {
        fprintf(stderr, "%s: relative error %.3g > %.3g at %zu (got %.9g, want %.9g)\n", what,
                worst, tol, worst_i, got[worst_i], want[worst_i]);
        return 1;
    }
    return 0;
}

static double elapsed_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + 1e-9 * (double)(now.tv_nsec - t0->tv_nsec);
}

int tsr_test_spawn(char **argv, const char *out_path, const char *err_path, double timeout,
                   tsr_test_child *r)
{
    memset(r, 0, sizeof *r);
    fflush(NULL);
    struct timespec t0, nap = {0, 5 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = err_path ? open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : o;
        if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(126);
        setpgid(0, 0);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    for (;;) {
        pid_t w = wait4(pid, &st, WNOHANG, &ru);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            fprintf(stderr, "waitpid: %s\n", strerror(errno));
            return -1;
        }
        if (elapsed_since(&t0) > timeout) {
            fprintf(stderr, "timeout after %.0f s: killing pid %d\n", timeout, (int)pid);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            r->timed_out = true;
            r->status = SIGKILL;
            r->seconds = elapsed_since(&t0);
            return 0;
        }
        nanosleep(&nap, NULL);
    }
    r->seconds = elapsed_since(&t0);
    r->max_rss_kib = ru.ru_maxrss;
    r->exited = WIFEXITED(st);
    r->status = r->exited ? WEXITSTATUS(st) : (WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    return 0;
}
