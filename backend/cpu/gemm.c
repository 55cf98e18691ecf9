/*
 * backend/cpu/gemm.c - the GEMM driver: blocking, packing and threads
 * (see gemm.h for why Tessera has its own, gemm_kernels.c for the
 * micro-kernels).
 *
 * Loop nest, for each block of columns whose packed B (all of K) fits
 * NC_BYTES:
 *   1. pack that block of B, all of K, into NR-wide column panels of K x NR
 *      (shared scratch, panels split over the pool);
 *   2. run tasks of (MC rows of A) x (a run of B panels) on the pool; a
 *      task walks every k-block (tsr_gemm_kblock: at most TSR_GEMM_KC,
 *      never straddling a conv tap of 192 channels or more) in order, so
 *      its MC x run block of C stays in L2 from the first k-block to the
 *      last; per k-block it calls the micro-kernel for every (B panel, A
 *      panel) pair, B panel outer so it stays in L1 while the A block (MC x
 *      KC, at most 144 KiB) stays in L2.  Where a k-block's rows lie
 *      contiguous (linear, 1x1 convs, a block inside one tap) the
 *      micro-kernel reads A in place through MR row pointers; a conv block
 *      that spans taps is first gathered row by row (the im2col, one copy
 *      per tap's run of channels, into its worker's scratch) and read the
 *      same way; only a k-major A is packed into MR-row panels.
 * So one call synchronises the pool twice per column block, not twice per
 * k-block: a 16x16 conv of 1280 channels (36 k-blocks) used to wait at 288
 * barriers per call, which on two threads ate its second thread's gain.
 * A tile that C's edge cuts is computed into a local tile and then added
 * with the same roundings, so edge elements are computed like all others.
 */
#include "backend/cpu/gemm.h"

#include <pthread.h>
#include <string.h>

#include "backend/cpu/gemm_kernels.h"
#include "core/error.h"
#include "core/log.h"

#define MC 96 /* rows per task: a multiple of every kernel's MR (6) */
/* Packed B of one column block, all of K: read by every task, so it should
 * stay in the shared L3 (at least 256 columns fit for K up to 8192). */
#define NC_BYTES ((int64_t)8 << 20)

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
    int64_t n0, nc;
    float *bp;      /* packed B: ceil(nc / nr) panels of k x nr */
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
    const int64_t k = g->k;
    for (int64_t jp = begin; jp < end; jp++) {
        float *dst = r->bp + jp * nr * k;
        const int64_t j0 = r->n0 + jp * nr;
        const int64_t jn = min64(nr, g->n - j0);
        if (g->b_kn) {
            for (int64_t p = 0; p < k; p++) {
                float *d = dst + p * nr;
                memcpy(d, g->b + p * g->ldb + j0, (size_t)jn * sizeof(float));
                for (int64_t jj = jn; jj < nr; jj++)
                    d[jj] = 0.0f;
            }
            continue;
        }
        if (jn == nr) {
            r->kr->pack_b_nk(g->b + j0 * g->ldb, g->ldb, k, nr, dst);
            continue;
        }
        for (int64_t jj = 0; jj < nr; jj++) {
            if (jj >= jn) {
                for (int64_t p = 0; p < k; p++)
                    dst[p * nr + jj] = 0.0f;
                continue;
            }
            const float *src = g->b + (j0 + jj) * g->ldb;
            for (int64_t p = 0; p < k; p++)
                dst[p * nr + jj] = src[p];
        }
    }
}

/* ---- packing A ---- */

static const float zeros[TSR_GEMM_KC]; /* the rows past A's edge, and the image's border */

/* Where row `row` of the implicit im2col has its columns [p, p + run):
 * run = as many as lie in one kernel tap (contiguous in the image), at most
 * `want`.  Returns the address of the first, or `zeros` off the image. */
static const float *conv_run(const tsr_gemm_im2col *cv, int64_t row, int64_t p, int64_t want,
                             int64_t *run)
{
    const int64_t per_img = cv->ho * cv->wo;
    const int64_t n = row / per_img, rem = row % per_img;
    const int64_t oh = rem / cv->wo, ow = rem % cv->wo;
    const int64_t tap = p / cv->ci, ch = p % cv->ci;
    *run = min64(cv->ci - ch, want);
    int64_t ih = oh * cv->sh - cv->pt + tap / cv->kw;
    int64_t iw = ow * cv->sw - cv->pl + tap % cv->kw;
    if (cv->circular) { /* a pad is at most the size (ops.c): one wrap */
        ih = ih < 0 ? ih + cv->h : ih >= cv->h ? ih - cv->h : ih;
        iw = iw < 0 ? iw + cv->w : iw >= cv->w ? iw - cv->w : iw;
    }
    if (ih < 0 || ih >= cv->h || iw < 0 || iw >= cv->w)
        return zeros;
    return cv->x + ((n * cv->h + ih) * cv->w + iw) * cv->ci + ch;
}

/* Interleave `len` columns of MR rows (row i at src[i]) into a panel. */
static void interleave(const float *const *src, int mr, int64_t len, float *dst)
{
    if (mr == 6) {
        const float *s0 = src[0], *s1 = src[1], *s2 = src[2], *s3 = src[3], *s4 = src[4],
                    *s5 = src[5];
        for (int64_t p = 0; p < len; p++, dst += 6) {
            dst[0] = s0[p], dst[1] = s1[p], dst[2] = s2[p];
            dst[3] = s3[p], dst[4] = s4[p], dst[5] = s5[p];
        }
        return;
    }
    for (int64_t p = 0; p < len; p++)
        for (int i = 0; i < mr; i++)
            dst[p * mr + i] = src[i][p];
}

/* Whether every row's columns [k0, k0 + kc) lie contiguous in memory, so
 * the micro-kernel can read A where it lies (no packing). */
static bool rows_direct(const tsr_gemm *g, int64_t k0, int64_t kc)
{
    if (g->a_km)
        return false;
    return !g->conv || k0 % g->conv->ci + kc <= g->conv->ci;
}

/* Row `row`'s columns [k0, k0 + kc) when rows_direct() holds. */
static const float *row_direct(const tsr_gemm *g, int64_t row, int64_t k0, int64_t kc)
{
    if (row >= g->m)
        return zeros;
    if (!g->conv)
        return g->a + row * g->lda + k0;
    int64_t run;
    return conv_run(g->conv, row, k0, kc, &run);
}

/* An output pixel's place for the im2col: its image and the input row and
 * column of its kernel's top-left tap (before padding wraps or cuts). */
typedef struct conv_pixel {
    const float *img; /* NULL: a row past A's edge (reads zeros) */
    int64_t ih0, iw0;
} conv_pixel;

static conv_pixel conv_pixel_of(const tsr_gemm_im2col *cv, int64_t row)
{
    const int64_t per_img = cv->ho * cv->wo;
    const int64_t n = row / per_img, rem = row % per_img;
    return (conv_pixel){.img = cv->x + n * cv->h * cv->w * cv->ci,
                        .ih0 = rem / cv->wo * cv->sh - cv->pt,
                        .iw0 = rem % cv->wo * cv->sw - cv->pl};
}

/* The pixel's channels [ch, ...) of tap (ky, kx): conv_run's address, from
 * coordinates worked out once per row instead of four divisions per tap. */
static const float *conv_tap(const tsr_gemm_im2col *cv, const conv_pixel *px, int64_t ky,
                             int64_t kx, int64_t ch)
{
    if (!px->img)
        return zeros;
    int64_t ih = px->ih0 + ky, iw = px->iw0 + kx;
    if (cv->circular) {
        ih = ih < 0 ? ih + cv->h : ih >= cv->h ? ih - cv->h : ih;
        iw = iw < 0 ? iw + cv->w : iw >= cv->w ? iw - cv->w : iw;
    }
    if (ih < 0 || ih >= cv->h || iw < 0 || iw >= cv->w)
        return zeros;
    return px->img + (ih * cv->w + iw) * cv->ci + ch;
}

/* Rows [i0, i0 + mc) of A's k-block into MR-row panels at ap (A stored
 * k-major, or rows of a plain A). */
static void pack_a(const gemm_run *r, int64_t k0, int64_t kc, int64_t i0, int64_t mc, float *ap)
{
    const tsr_gemm *g = r->g;
    const int mr = r->kr->mr;
    _Alignas(64) float gathered[TSR_GEMM_MAX_MR][TSR_GEMM_KC];
    const float *src[TSR_GEMM_MAX_MR];
    for (int64_t ip = 0; ip * mr < mc; ip++) {
        float *dst = ap + ip * mr * kc;
        const int64_t base = i0 + ip * mr;
        const int64_t valid = min64(mr, mc - ip * mr);
        if (g->a_km) {
            for (int i = 0; i < mr; i++) {
                src[i] = zeros;
                if (i < valid && base + i < g->m) {
                    const float *s = g->a + k0 * g->lda + base + i;
                    for (int64_t p = 0; p < kc; p++)
                        gathered[i][p] = s[p * g->lda];
                    src[i] = gathered[i];
                }
            }
            interleave(src, mr, kc, dst);
            continue;
        }
        for (int i = 0; i < mr; i++)
            src[i] = i >= valid || base + i >= g->m ? zeros : g->a + (base + i) * g->lda + k0;
        interleave(src, mr, kc, dst);
    }
}

/* A conv's rows [i0, i0 + mc) for a k-block that spans taps: each row's
 * kc columns gathered into one contiguous row at ap + i * kc (a copy of
 * each tap's run of channels, or zeros off the image), so the micro-kernel
 * reads them through row pointers as it reads a linear layer's A in place.
 * A copy per run instead of an MR-row interleave per column: the
 * interleave was 70% of gemm_task on the demo model's 24-channel convs.
 * Only the copies change; the kernel's arithmetic is the same (fn and
 * fn_rows differ in where they fetch A alone). */
static void gather_rows(const gemm_run *r, int64_t k0, int64_t kc, int64_t i0, int64_t mc,
                        float *ap, const float **rowp)
{
    const tsr_gemm_im2col *cv = r->g->conv;
    int64_t ky[TSR_GEMM_KC], kx[TSR_GEMM_KC], ch[TSR_GEMM_KC], len[TSR_GEMM_KC];
    int nruns = 0;
    for (int64_t p = k0; p < k0 + kc; nruns++) {
        const int64_t tap = p / cv->ci;
        ch[nruns] = p % cv->ci;
        len[nruns] = min64(cv->ci - ch[nruns], k0 + kc - p);
        ky[nruns] = tap / cv->kw;
        kx[nruns] = tap % cv->kw;
        p += len[nruns];
    }
    for (int64_t i = 0; i < mc; i++) {
        const conv_pixel px = conv_pixel_of(cv, i0 + i);
        float *dst = ap + i * kc;
        for (int t = 0; t < nruns; t++) {
            memcpy(dst, conv_tap(cv, &px, ky[t], kx[t], ch[t]), (size_t)len[t] * sizeof(float));
            dst += len[t];
        }
        rowp[i] = ap + i * kc;
    }
}

/* ---- the tasks ---- */

static void gemm_task(void *ctx_, int64_t begin, int64_t end, int worker)
{
    const gemm_run *r = ctx_;
    const tsr_gemm *g = r->g;
    const tsr_gemm_kernel *kr = r->kr;
    const int mr = kr->mr, nr = kr->nr;
    float *ap = r->ctx->worker[worker].ptr;
    _Alignas(64) float tile[TSR_GEMM_MAX_MR * TSR_GEMM_MAX_NR];
    /* A's rows, read in place (rows_direct); MC + MR so a short last panel
     * reads `zeros` past the block's end */
    const float *rowp[MC + TSR_GEMM_MAX_MR];
    const int64_t npanels = (r->nc + nr - 1) / nr;
    for (int64_t t = begin; t < end; t++) {
        const int64_t mb = t / r->nsub, sb = t % r->nsub;
        const int64_t i0 = mb * MC, mc = min64(MC, g->m - i0);
        const int64_t jp0 = sb * r->spanel, jp1 = min64(npanels, jp0 + r->spanel);
        if (jp0 >= jp1)
            continue;
        if (g->bias) {
            const int64_t j0 = r->n0 + jp0 * nr, j1 = min64(g->n, r->n0 + jp1 * nr);
            for (int64_t i = 0; i < mc; i++)
                memcpy(g->c + (i0 + i) * g->ldc + j0, g->bias + j0,
                       (size_t)(j1 - j0) * sizeof(float));
        }
        /* every k-block in order: the same sums, in the same order, as one
         * k-block at a time over all of C */
        for (int64_t k0 = 0, kc; k0 < g->k; k0 += kc) {
            kc = tsr_gemm_kblock(g, k0);
            const bool acc = g->accumulate || k0 > 0;
            /* rows read through pointers: in place, or a conv's gathered */
            const bool direct = rows_direct(g, k0, kc) || g->conv;
            if (rows_direct(g, k0, kc))
                for (int64_t i = 0; i < mc; i++)
                    rowp[i] = row_direct(g, i0 + i, k0, kc);
            else if (g->conv)
                gather_rows(r, k0, kc, i0, mc, ap, rowp);
            else
                pack_a(r, k0, kc, i0, mc, ap);
            if (direct)
                for (int64_t i = mc; i < MC + TSR_GEMM_MAX_MR; i++)
                    rowp[i] = zeros;
            for (int64_t jp = jp0; jp < jp1; jp++) {
                const int64_t j = r->n0 + jp * nr;
                const int64_t cols = min64(nr, g->n - j);
                const float *bpp = r->bp + jp * nr * g->k + k0 * nr;
                for (int64_t ip = 0; ip * mr < mc; ip++) {
                    const int64_t rows = min64(mr, mc - ip * mr);
                    float *cp = g->c + (i0 + ip * mr) * g->ldc + j;
                    const float *app = ap + ip * mr * kc;
                    const float *const *rpp = rowp + ip * mr;
                    if (rows == mr && cols == nr) {
                        if (direct)
                            kr->fn_rows(kc, rpp, bpp, cp, g->ldc, g->alpha, acc);
                        else
                            kr->fn(kc, app, bpp, cp, g->ldc, g->alpha, acc);
                        continue;
                    }
                    if (direct)
                        kr->fn_rows(kc, rpp, bpp, tile, nr, g->alpha, false);
                    else
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
}

int64_t tsr_gemm_kblock(const tsr_gemm *g, int64_t k0)
{
    const int64_t unit = g->conv ? g->conv->ci : g->k;
    if (unit * 2 < TSR_GEMM_KC) /* short runs: as many whole ones as fit */
        return min64(unit * (TSR_GEMM_KC / unit), g->k - k0);
    const int64_t parts = (unit + TSR_GEMM_KC - 1) / TSR_GEMM_KC;
    const int64_t len = (unit + parts - 1) / parts;
    const int64_t pos = k0 % unit;
    return min64(min64(len - pos % len, unit - pos), g->k - k0);
}

int tsr_cpu_gemm(cpu_ctx *c, const tsr_gemm *g)
{
    if (g->m <= 0 || g->n <= 0)
        return TSR_OK;
    if (g->k <= 0) {
        if (g->bias)
            for (int64_t i = 0; i < g->m; i++)
                memcpy(g->c + i * g->ldc, g->bias, (size_t)g->n * sizeof(float));
        else if (!g->accumulate)
            for (int64_t i = 0; i < g->m; i++)
                memset(g->c + i * g->ldc, 0, (size_t)g->n * sizeof(float));
        return TSR_OK;
    }
    gemm_run r = {.g = g, .kr = g->pairs ? tsr_gemm_kernel_bf16() : kernel(), .ctx = c};
    if (!r.kr || (g->pairs && (g->a_km || g->b_kn)))
        return tsr_errorf(TSR_ERR_UNSUPPORTED, "cpu gemm: bf16 pairs need AVX512_BF16 and "
                                               "row-major operands");
    const int nr = r.kr->nr;
    const int threads = c->n_threads > 0 ? c->n_threads : 1;
    /* column blocks of equal width (in whole panels) whose packed B fits NC_BYTES */
    const int64_t panels = (g->n + nr - 1) / nr;
    int64_t fit = NC_BYTES / (g->k * nr * (int64_t)sizeof(float));
    if (fit < 1)
        fit = 1;
    const int64_t nblocks = (panels + fit - 1) / fit;
    const int64_t nc_blk = (panels + nblocks - 1) / nblocks * nr;
    const int64_t kc_max = min64(TSR_GEMM_KC, g->k);
    float *bp = tsr_cpu_scratch_shared(c, (size_t)(nc_blk * g->k) * sizeof(float));
    if (!bp)
        return TSR_ERR_NOMEM;
    int rc = tsr_cpu_scratch_workers_reserve(c, (size_t)(MC * kc_max) * sizeof(float));
    if (rc < 0)
        return rc;
    r.bp = bp;
    const int64_t mblocks = (g->m + MC - 1) / MC;
    for (r.n0 = 0; r.n0 < g->n; r.n0 += nc_blk) {
        r.nc = min64(nc_blk, g->n - r.n0);
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
        tsr_pool_parallel_for(c->pool, npanels, tsr_cpu_grain(g->k * nr, 1 << 14), pack_b_task, &r);
        /* one task per claim: a task (all of K for MC rows) is long, and the
         * default four chunks per thread would leave a thread idle at the end */
        tsr_pool_parallel_for_chunk(c->pool, mblocks * r.nsub, 1, gemm_task, &r);
    }
    return TSR_OK;
}
