/*
 * backend/cpu/gemm.c - the GEMM driver: blocking, packing and threads
 * (see gemm.h for why Tessera has its own, gemm_kernels.c for the
 * micro-kernels).
 *
 * Loop nest, for each block of up to NC_MAX columns and each k-block of
 * TSR_GEMM_KC:
 *   1. pack B's k-block into NR-wide panels (shared scratch, panels split
 *      over the pool);
 *   2. run tasks of (MC rows of A) x (a run of B panels) on the pool; a
 *      task packs its rows of A into MR-row panels (its worker's scratch;
 *      for a conv the im2col happens here, from the NHWC image) and calls
 *      the micro-kernel for every (B panel, A panel) pair, B panel outer so
 *      it stays in L1 while the A block (MC x KC, 96 KiB) stays in L2.
 * A tile that C's edge cuts is computed into a local tile and then added
 * with the same roundings, so edge elements are computed like all others.
 */
#include "backend/cpu/gemm.h"

#include <pthread.h>
#include <string.h>

#include "backend/cpu/gemm_kernels.h"
#include "core/error.h"
#include "core/log.h"

#define MC 96       /* rows per task: a multiple of every kernel's MR (6) */
#define NC_MAX 4096 /* columns of B packed at once (4 MiB at KC = 256) */

static pthread_once_t kernel_once = PTHREAD_ONCE_INIT;
static const tsr_gemm_kernel *kernel_sel;

static void kernel_init(void)
{
    kernel_sel = tsr_gemm_kernel_for(tsr_cpu_isa());
    TSR_DEBUG("cpu gemm: %s micro-kernel (vector level %s)", kernel_sel->name,
              tsr_cpu_isa_name(tsr_cpu_isa()));
}

static const tsr_gemm_kernel *kernel(void)
{
    pthread_once(&kernel_once, kernel_init);
    return kernel_sel;
}

const char *tsr_cpu_gemm_kernel(void) { return kernel()->name; }

typedef struct gemm_run {
    const tsr_gemm *g;
    const tsr_gemm_kernel *kr;
    cpu_ctx *ctx;
    int64_t k0, kc, n0, nc;
    float *bp;      /* packed B: ceil(nc / nr) panels of kc x nr */
    int64_t nsub;   /* column runs per row block */
    int64_t spanel; /* B panels per column run */
} gemm_run;

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- packing B ---- */

static void pack_b_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    (void)worker;
    const gemm_run *r = ctx_;
    const tsr_gemm *g = r->g;
    const int nr = r->kr->nr;
    const int64_t kc = r->kc;
    for (int64_t jp = begin; jp < end; jp++) {
        float *dst = r->bp + jp * nr * kc;
        const int64_t j0 = r->n0 + jp * nr;
        const int64_t jn = min64(nr, g->n - j0);
        if (g->b_kn) {
            for (int64_t p = 0; p < kc; p++) {
                float *d = dst + p * nr;
                memcpy(d, g->b + (r->k0 + p) * g->ldb + j0, (size_t)jn * sizeof(float));
                for (int64_t jj = jn; jj < nr; jj++)
                    d[jj] = 0.0f;
            }
            continue;
        }
        if (jn == nr) {
            r->kr->pack_b_nk(g->b + j0 * g->ldb + r->k0, g->ldb, kc, nr, dst);
            continue;
        }
        for (int64_t jj = 0; jj < nr; jj++) {
            if (jj >= jn) {
                for (int64_t p = 0; p < kc; p++)
                    dst[p * nr + jj] = 0.0f;
                continue;
            }
            const float *src = g->b + (j0 + jj) * g->ldb + r->k0;
            for (int64_t p = 0; p < kc; p++)
                dst[p * nr + jj] = src[p];
        }
    }
}

/* ---- packing A ---- */

/* Row `row` of the implicit im2col, columns [k0, k0 + kc), into dst. */
static void gather_conv_row(const tsr_gemm_im2col *cv, int64_t row, int64_t k0, int64_t kc,
                            float *dst)
{
    const int64_t per_img = cv->ho * cv->wo;
    const int64_t n = row / per_img, rem = row % per_img;
    const int64_t oh = rem / cv->wo, ow = rem % cv->wo;
    int64_t p = k0;
    const int64_t end = k0 + kc;
    while (p < end) {
        const int64_t tap = p / cv->ci, ch = p % cv->ci;
        const int64_t run = min64(cv->ci - ch, end - p);
        const int64_t ih = oh * cv->sh - cv->pt + tap / cv->kw;
        const int64_t iw = ow * cv->sw - cv->pl + tap % cv->kw;
        if (ih < 0 || ih >= cv->h || iw < 0 || iw >= cv->w)
            memset(dst + (p - k0), 0, (size_t)run * sizeof(float));
        else
            memcpy(dst + (p - k0), cv->x + ((n * cv->h + ih) * cv->w + iw) * cv->ci + ch,
                   (size_t)run * sizeof(float));
        p += run;
    }
}

/* Rows [i0, i0 + mc) of A's k-block into MR-row panels at ap.  Each row
 * of a panel is first made contiguous (a pointer into A when it already
 * is, else gathered into `rows`), then the panel is written in one
 * sequential pass. */
static void pack_a(const gemm_run *r, int64_t i0, int64_t mc, float *ap)
{
    const tsr_gemm *g = r->g;
    const int mr = r->kr->mr;
    const int64_t kc = r->kc, k0 = r->k0;
    _Alignas(64) float rows[TSR_GEMM_MAX_MR][TSR_GEMM_KC];
    const float *rp[TSR_GEMM_MAX_MR];
    for (int64_t ip = 0; ip * mr < mc; ip++) {
        for (int ii = 0; ii < mr; ii++) {
            const int64_t row = i0 + ip * mr + ii;
            rp[ii] = rows[ii];
            if (row >= g->m || ip * mr + ii >= mc) {
                memset(rows[ii], 0, (size_t)kc * sizeof(float));
            } else if (g->conv) {
                gather_conv_row(g->conv, row, k0, kc, rows[ii]);
            } else if (g->a_km) {
                const float *s = g->a + k0 * g->lda + row;
                for (int64_t p = 0; p < kc; p++)
                    rows[ii][p] = s[p * g->lda];
            } else {
                rp[ii] = g->a + row * g->lda + k0;
            }
        }
        float *dst = ap + ip * mr * kc;
        if (mr == 6) {
            const float *s0 = rp[0], *s1 = rp[1], *s2 = rp[2], *s3 = rp[3], *s4 = rp[4],
                        *s5 = rp[5];
            for (int64_t p = 0; p < kc; p++, dst += 6) {
                dst[0] = s0[p], dst[1] = s1[p], dst[2] = s2[p];
                dst[3] = s3[p], dst[4] = s4[p], dst[5] = s5[p];
            }
        } else {
            for (int64_t p = 0; p < kc; p++)
                for (int ii = 0; ii < mr; ii++)
                    dst[p * mr + ii] = rp[ii][p];
        }
    }
}

/* ---- the tasks ---- */

static void gemm_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    const gemm_run *r = ctx_;
    const tsr_gemm *g = r->g;
    const tsr_gemm_kernel *kr = r->kr;
    const int mr = kr->mr, nr = kr->nr;
    const int64_t kc = r->kc;
    const bool acc = g->accumulate || r->k0 > 0;
    float *ap = r->ctx->worker[worker].ptr;
    _Alignas(64) float tile[TSR_GEMM_MAX_MR * TSR_GEMM_MAX_NR];
    const int64_t npanels = (r->nc + nr - 1) / nr;
    for (int64_t t = begin; t < end; t++) {
        const int64_t mb = t / r->nsub, sb = t % r->nsub;
        const int64_t i0 = mb * MC, mc = min64(MC, g->m - i0);
        const int64_t jp0 = sb * r->spanel, jp1 = min64(npanels, jp0 + r->spanel);
        if (jp0 >= jp1)
            continue;
        pack_a(r, i0, mc, ap);
        for (int64_t jp = jp0; jp < jp1; jp++) {
            const int64_t j = r->n0 + jp * nr;
            const int64_t cols = min64(nr, g->n - j);
            const float *bpp = r->bp + jp * nr * kc;
            for (int64_t ip = 0; ip * mr < mc; ip++) {
                const int64_t rows = min64(mr, mc - ip * mr);
                float *cp = g->c + (i0 + ip * mr) * g->ldc + j;
                const float *app = ap + ip * mr * kc;
                if (rows == mr && cols == nr) {
                    kr->fn(kc, app, bpp, cp, g->ldc, g->alpha, acc);
                    continue;
                }
                kr->fn(kc, app, bpp, tile, nr, g->alpha, false);
                for (int64_t i = 0; i < rows; i++)
                    for (int64_t jj = 0; jj < cols; jj++) {
                        const float v = tile[i * nr + jj];
                        cp[i * g->ldc + jj] = acc ? cp[i * g->ldc + jj] + v : v;
                    }
            }
        }
    }
}

int tsr_cpu_gemm(cpu_ctx *c, const tsr_gemm *g)
{
    if (g->m <= 0 || g->n <= 0)
        return TSR_OK;
    if (g->k <= 0) {
        if (!g->accumulate)
            for (int64_t i = 0; i < g->m; i++)
                memset(g->c + i * g->ldc, 0, (size_t)g->n * sizeof(float));
        return TSR_OK;
    }
    gemm_run r = {.g = g, .kr = kernel(), .ctx = c};
    const int nr = r.kr->nr;
    const int threads = c->n_threads > 0 ? c->n_threads : 1;
    const int64_t nc_max = min64(NC_MAX, ((g->n + nr - 1) / nr) * nr);
    const int64_t kc_max = min64(TSR_GEMM_KC, g->k);
    float *bp = tsr_cpu_scratch_shared(c, (size_t)(nc_max * kc_max) * sizeof(float));
    if (!bp)
        return TSR_ERR_NOMEM;
    int rc = tsr_cpu_scratch_workers_reserve(c, (size_t)(MC * kc_max) * sizeof(float));
    if (rc < 0)
        return rc;
    r.bp = bp;
    const int64_t mblocks = (g->m + MC - 1) / MC;
    for (r.n0 = 0; r.n0 < g->n; r.n0 += NC_MAX) {
        r.nc = min64(NC_MAX, g->n - r.n0);
        const int64_t npanels = (r.nc + nr - 1) / nr;
        /* enough tasks for every thread to get ~4: split columns when rows are few
         */
        int64_t nsub = (4 * threads + mblocks - 1) / mblocks;
        if (nsub > npanels)
            nsub = npanels;
        if (nsub < 1)
            nsub = 1;
        r.spanel = (npanels + nsub - 1) / nsub;
        r.nsub = (npanels + r.spanel - 1) / r.spanel;
        for (r.k0 = 0; r.k0 < g->k; r.k0 += TSR_GEMM_KC) {
            r.kc = min64(TSR_GEMM_KC, g->k - r.k0);
            tsr_pool_parallel_for(c->pool, npanels, tsr_cpu_grain(r.kc * nr, 1 << 14), pack_b_task,
                                  &r);
            tsr_pool_parallel_for(c->pool, mblocks * r.nsub, 1, gemm_task, &r);
        }
    }
    return TSR_OK;
}
