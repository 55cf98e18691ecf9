/*
 * tests/gpu/test_fa2_layout.c - the FA2 attention kernel's bookkeeping
 * (backend/cuda/fa2_layout.h, used by ops_attention_fa2.cu), checked on the
 * host: label unit, no GPU, no CUDA toolkit.
 *
 * The two instructions the kernel is built on are emulated here from the
 * PTX ISA's description, written out independently of the header:
 *   - mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: the fragment
 *     tables of "Matrix Fragments for mma.m16n8k16 with floating point
 *     type" (elements a0..a7, b0..b3, c0..c3; lower-indexed half in the
 *     low 16 bits of a register);
 *   - ldmatrix.sync.aligned.m8n8.x{2,4}[.trans].shared.b16: threads 8m..8m+7
 *     supply the row addresses of matrix m; register m of lane l receives
 *     row l/4, columns 2(l%4) and 2(l%4)+1 of matrix m (.trans: of its
 *     transpose).
 * Then the header's maps drive them exactly as the kernel does:
 *   fragment_maps  the C map (masking, output placement) and the S -> P
 *                  register reuse against the PTX tables;
 *   ldmatrix_maps  every ldmatrix address the kernel forms (Q, K, V, the .x2
 *                  tail) delivers the operand element the mma expects;
 *   smem_layout    the padded layout is injective and in bounds, every
 *                  ldmatrix phase and the output staging are free of bank
 *                  conflicts;
 *   warp_products  one warp's S = Q K^T and O = P V through those maps equal
 *                  a triple loop exactly (small integers), per head dim;
 *   flash_blocks   the whole kernel (every block, warp and lane; cp.async
 *                  with zero fill, NaN-poisoned shared memory, masking, the
 *                  online softmax, the 16-byte output staging) against the
 *                  CPU backend's attention: tails, causal, rows that see no
 *                  key (exactly 0), all four head dims.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/fa2_layout.h"
#include "test.h"

static const int head_dims[] = {40, 64, 80, 160};
#define N_DIMS ((int)(sizeof head_dims / sizeof head_dims[0]))

/* ---- the hardware, from the PTX ISA (independent of fa2_layout.h) ---- */

static int hw_a_row(int lane, int i) /* a_i, i = 0..7 */
{
    const int g = lane >> 2;
    return (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
}
static int hw_a_col(int lane, int i)
{
    const int t = lane % 4;
    return i < 4 ? t * 2 + (i & 1) : t * 2 + (i & 1) + 8;
}
static int hw_b_row(int lane, int i) /* b_i, i = 0..3: row = k */
{
    const int t = lane % 4;
    return i < 2 ? t * 2 + (i & 1) : t * 2 + (i & 1) + 8;
}
static int hw_b_col(int lane) { return lane >> 2; } /* col = n */
static int hw_c_row(int lane, int i) { return i < 2 ? lane >> 2 : (lane >> 2) + 8; }
static int hw_c_col(int lane, int i) { return (lane % 4) * 2 + (i & 1); }

static uint16_t half_of(uint32_t r, int h) { return (uint16_t)(h ? r >> 16 : r & 0xffffu); }
static uint32_t pack2(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }
static float f16(uint16_t h) { return tsr_cu_f16_to_f32(h); }
static uint16_t to_f16(float f) { return tsr_cu_f32_to_f16(f); }

/* d[lane][0..3] += A x B, one m16n8k16; 0 unless some element of A, B or C
 * is held by no lane or by two */
static int emu_mma(float c[32][4], const uint32_t a[32][4], const uint32_t b0[32],
                   const uint32_t b1[32])
{
    float A[16][16], B[16][8], C[16][8];
    int na[16][16] = {{0}}, nb[16][8] = {{0}}, nc[16][8] = {{0}};
    for (int lane = 0; lane < 32; lane++) {
        for (int i = 0; i < 8; i++) {
            const int r = hw_a_row(lane, i), col = hw_a_col(lane, i);
            A[r][col] = f16(half_of(a[lane][i / 2], i % 2));
            na[r][col]++;
        }
        for (int i = 0; i < 4; i++) {
            const int r = hw_b_row(lane, i), col = hw_b_col(lane);
            B[r][col] = f16(half_of(i < 2 ? b0[lane] : b1[lane], i % 2));
            nb[r][col]++;
        }
        for (int i = 0; i < 4; i++) {
            C[hw_c_row(lane, i)][hw_c_col(lane, i)] = c[lane][i];
            nc[hw_c_row(lane, i)][hw_c_col(lane, i)]++;
        }
    }
    for (int r = 0; r < 16; r++)
        for (int col = 0; col < 16; col++)
            if (na[r][col] != 1 || (col < 8 && (nb[r][col] != 1 || nc[r][col] != 1)))
                return 1;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            float acc = C[r][n];
            for (int kk = 0; kk < 16; kk++)
                acc += A[r][kk] * B[kk][n];
            C[r][n] = acc;
        }
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++)
            c[lane][i] = C[hw_c_row(lane, i)][hw_c_col(lane, i)];
    return 0;
}

/* ldmatrix of nmat 8x8 matrices; addr[lane]: the row's first half, in
 * halves from smem (only lanes 0..8*nmat-1 are read) */
static void emu_ldm(uint32_t out[32][4], const uint16_t *smem, const int addr[32], int nmat,
                    int trans)
{
    for (int mi = 0; mi < nmat; mi++) {
        uint16_t M[8][8];
        for (int r = 0; r < 8; r++)
            for (int col = 0; col < 8; col++)
                M[r][col] = smem[addr[8 * mi + r] + col];
        for (int lane = 0; lane < 32; lane++) {
            const int g = lane / 4, t = lane % 4;
            out[lane][mi] =
                trans ? pack2(M[2 * t][g], M[2 * t + 1][g]) : pack2(M[g][2 * t], M[g][2 * t + 1]);
        }
    }
}

/* split a x4 result into the B registers of two n8 tiles */
static void b_regs(const uint32_t x[32][4], int u, uint32_t b0[32], uint32_t b1[32])
{
    for (int lane = 0; lane < 32; lane++) {
        b0[lane] = x[lane][2 * u];
        b1[lane] = x[lane][2 * u + 1];
    }
}

/* ---- fragment_maps ---- */

static int test_fragment_maps(void)
{
    int seen[16][8] = {{0}};
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            ASSERT_EQ(tsr_fa2_c_row(lane, i), hw_c_row(lane, i));
            ASSERT_EQ(tsr_fa2_c_col(lane, i), hw_c_col(lane, i));
            seen[tsr_fa2_c_row(lane, i)][tsr_fa2_c_col(lane, i)]++;
        }
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++)
            ASSERT_EQ(seen[r][n], 1);
    /* S -> P: half h of A register r of key step kk is S element s[p_src]
     * of the same lane; that element's (row, key) must be the A element's
     * (row, 16kk + col) */
    for (int kk = 0; kk < 4; kk++)
        for (int lane = 0; lane < 32; lane++)
            for (int r = 0; r < 4; r++)
                for (int h = 0; h < 2; h++) {
                    const int idx = tsr_fa2_p_src(kk, r, h), j = idx / 4, i = idx % 4;
                    ASSERT_TRUE(idx >= 0 && idx < 4 * 8);
                    ASSERT_EQ(hw_c_row(lane, i), hw_a_row(lane, 2 * r + h));
                    ASSERT_EQ(8 * j + hw_c_col(lane, i), 16 * kk + hw_a_col(lane, 2 * r + h));
                }
    return 0;
}

/* ---- ldmatrix_maps ---- */

/* an image of [rows][LDC] chunks where every half holds its own (row, col)
 * code, row*256 + col; padding chunks hold 0xffff */
static uint16_t *coded_image(int rows, int ldc, int cols)
{
    uint16_t *s = malloc((size_t)rows * ldc * 8 * sizeof(uint16_t));
    if (!s)
        return NULL;
    for (int i = 0; i < rows * ldc * 8; i++)
        s[i] = 0xffffu;
    for (int r = 0; r < rows; r++)
        for (int col = 0; col < cols; col++)
            s[8 * tsr_fa2_smem(r, col / 8, ldc) + col % 8] = (uint16_t)(r * 256 + col);
    return s;
}

static int test_ldmatrix_maps(void)
{
    for (int di = 0; di < N_DIMS; di++) {
        const int d = head_dims[di], DK = TSR_FA2_DK(d), BK = TSR_FA2_BK(d), LDC = TSR_FA2_LDC(d);
        const int NO = d / 8;
        /* Q: rows of the block, cols up to DK (the padded reduction) */
        uint16_t *qs = coded_image(TSR_FA2_ROWS, LDC, DK), *ks = coded_image(BK, LDC, DK);
        uint16_t *vs = coded_image(BK, LDC, d);
        ASSERT_TRUE(qs && ks && vs);
        uint32_t x[32][4];
        int addr[32];
        for (int w = 0; w < TSR_FA2_WARPS; w++)
            for (int kk = 0; kk < DK / 16; kk++) {
                for (int lane = 0; lane < 32; lane++) {
                    const int ch = tsr_fa2_ldm_q_chunk(lane, kk);
                    ASSERT_TRUE(ch < DK / 8);
                    addr[lane] = 8 * tsr_fa2_smem(tsr_fa2_ldm_q_row(lane, w), ch, LDC);
                }
                emu_ldm(x, qs, addr, 4, 0);
                for (int lane = 0; lane < 32; lane++)
                    for (int i = 0; i < 8; i++) {
                        const int want =
                            (16 * w + hw_a_row(lane, i)) * 256 + 16 * kk + hw_a_col(lane, i);
                        ASSERT_EQ(half_of(x[lane][i / 2], i % 2), want);
                    }
            }
        /* K: B(k = dim, n = key) of n8 tiles 2jp + u */
        for (int kk = 0; kk < DK / 16; kk++)
            for (int jp = 0; jp < BK / 16; jp++) {
                for (int lane = 0; lane < 32; lane++)
                    addr[lane] = 8 * tsr_fa2_smem(tsr_fa2_ldm_k_row(lane, jp),
                                                  tsr_fa2_ldm_k_chunk(lane, kk), LDC);
                emu_ldm(x, ks, addr, 4, 0);
                for (int u = 0; u < 2; u++)
                    for (int lane = 0; lane < 32; lane++)
                        for (int i = 0; i < 4; i++) {
                            const int key = 16 * jp + 8 * u + hw_b_col(lane);
                            const int dim = 16 * kk + hw_b_row(lane, i);
                            ASSERT_EQ(half_of(x[lane][2 * u + i / 2], i % 2), key * 256 + dim);
                        }
            }
        /* V, .trans: B(k = key, n = dim) of output n8 tiles 2np + u; the odd
         * last tile through .x2 */
        for (int kk = 0; kk < BK / 16; kk++)
            for (int np = 0; np < (NO + 1) / 2; np++) {
                const int nmat = 2 * np + 1 < NO ? 4 : 2;
                for (int lane = 0; lane < 32; lane++) {
                    const int ch = tsr_fa2_ldm_v_chunk(lane, np);
                    if (lane < 8 * nmat)
                        ASSERT_TRUE(ch < d / 8);
                    addr[lane] = 8 * tsr_fa2_smem(tsr_fa2_ldm_v_row(lane, kk), ch, LDC);
                }
                emu_ldm(x, vs, addr, nmat, 1);
                for (int u = 0; u < nmat / 2; u++)
                    for (int lane = 0; lane < 32; lane++)
                        for (int i = 0; i < 4; i++) {
                            const int key = 16 * kk + hw_b_row(lane, i);
                            const int dim = 16 * np + 8 * u + hw_b_col(lane);
                            ASSERT_EQ(half_of(x[lane][2 * u + i / 2], i % 2), key * 256 + dim);
                        }
            }
        free(qs);
        free(ks);
        free(vs);
    }
    return 0;
}

/* ---- smem_layout ---- */

/* the 8 rows of one ldmatrix matrix (lanes 8m..8m+7) in 8 different
 * 16-byte bank groups */
static int phase_conflict_free(const int addr[32], int nmat)
{
    for (int mi = 0; mi < nmat; mi++) {
        int used = 0;
        for (int r = 0; r < 8; r++) {
            const int grp = (addr[8 * mi + r] / 8) % 8;
            if (used & (1 << grp))
                return 0;
            used |= 1 << grp;
        }
    }
    return 1;
}

static int test_smem_layout(void)
{
    for (int di = 0; di < N_DIMS; di++) {
        const int d = head_dims[di], DK = TSR_FA2_DK(d), BK = TSR_FA2_BK(d), LDC = TSR_FA2_LDC(d);
        const int CD = d / 8, NO = d / 8, rows = TSR_FA2_ROWS + 4 * BK;
        ASSERT_TRUE(LDC % 2 == 1 && LDC >= DK / 8 && DK % 16 == 0 && DK >= d);
        ASSERT_EQ(tsr_fa2_smem_bytes(d), (size_t)16 * rows * LDC);
        /* injective, in bounds */
        unsigned char *hit = calloc((size_t)rows * LDC, 1);
        ASSERT_TRUE(hit);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < LDC; c++) {
                const int at = tsr_fa2_smem(r, c, LDC);
                ASSERT_TRUE(at >= 0 && at < rows * LDC);
                ASSERT_EQ(hit[at], 0);
                hit[at] = 1;
            }
        free(hit);
        /* every ldmatrix the kernel issues */
        int addr[32];
        for (int w = 0; w < TSR_FA2_WARPS; w++)
            for (int kk = 0; kk < DK / 16; kk++) {
                for (int lane = 0; lane < 32; lane++)
                    addr[lane] = 8 * tsr_fa2_smem(tsr_fa2_ldm_q_row(lane, w),
                                                  tsr_fa2_ldm_q_chunk(lane, kk), LDC);
                ASSERT_TRUE(phase_conflict_free(addr, 4));
            }
        for (int kk = 0; kk < DK / 16; kk++)
            for (int jp = 0; jp < BK / 16; jp++) {
                for (int lane = 0; lane < 32; lane++)
                    addr[lane] = 8 * tsr_fa2_smem(tsr_fa2_ldm_k_row(lane, jp),
                                                  tsr_fa2_ldm_k_chunk(lane, kk), LDC);
                ASSERT_TRUE(phase_conflict_free(addr, 4));
            }
        for (int kk = 0; kk < BK / 16; kk++)
            for (int np = 0; np < (NO + 1) / 2; np++) {
                for (int lane = 0; lane < 32; lane++)
                    addr[lane] = 8 * tsr_fa2_smem(tsr_fa2_ldm_v_row(lane, kk),
                                                  tsr_fa2_ldm_v_chunk(lane, np), LDC);
                ASSERT_TRUE(phase_conflict_free(addr, 2 * np + 1 < NO ? 4 : 2));
            }
        /* the output staging: one 4-byte word per lane, 32 different banks */
        for (int w = 0; w < TSR_FA2_WARPS; w++)
            for (int n = 0; n < NO; n++)
                for (int r = 0; r < 2; r++) {
                    unsigned banks = 0;
                    for (int lane = 0; lane < 32; lane++) {
                        const int row = 16 * w + tsr_fa2_c_row(lane, 2 * r);
                        const int col = 8 * n + tsr_fa2_c_col(lane, 2 * r);
                        const int word = (8 * tsr_fa2_smem(row, col / 8, LDC) + col % 8) / 2;
                        ASSERT_TRUE((banks & (1u << (word % 32))) == 0);
                        banks |= 1u << (word % 32);
                    }
                }
        /* cp.async stores, 8 threads of 16 bytes per phase: at most 2-way */
        for (int e0 = 0; e0 < BK * CD; e0 += 8) {
            int ways[8] = {0};
            for (int e = e0; e < e0 + 8 && e < BK * CD; e++)
                ways[tsr_fa2_smem(e / CD, e % CD, LDC) % 8]++;
            for (int g = 0; g < 8; g++)
                ASSERT_TRUE(ways[g] <= 2);
        }
    }
    return 0;
}

/* ---- warp_products ---- */

static uint64_t rng_state = 0x853c49e6748fea9bull;

static uint32_t rnd_u32(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}

static float rnd_uniform(float a) /* [-a, a) */
{
    return ((float)(rnd_u32() >> 8) / 16777216.0f * 2.0f - 1.0f) * a;
}

static int test_warp_products(void)
{
    for (int di = 0; di < N_DIMS; di++) {
        const int d = head_dims[di], DK = TSR_FA2_DK(d), BK = TSR_FA2_BK(d), LDC = TSR_FA2_LDC(d);
        const int NT = BK / 8, NO = d / 8, KQ = DK / 16, KP = BK / 16;
        /* integers in -2..2: every product and sum is exact in f16 / f32 */
        int Q[16][160], K[64][160], V[64][160];
        uint16_t *qs = calloc((size_t)16 * LDC * 8, 2), *ks = calloc((size_t)BK * LDC * 8, 2);
        uint16_t *vs = calloc((size_t)BK * LDC * 8, 2);
        ASSERT_TRUE(qs && ks && vs);
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < DK; c++) {
                Q[r][c] = c < d ? (int)(rnd_u32() % 5) - 2 : 0;
                qs[8 * tsr_fa2_smem(r, c / 8, LDC) + c % 8] = to_f16((float)Q[r][c]);
            }
        for (int r = 0; r < BK; r++)
            for (int c = 0; c < DK; c++) {
                K[r][c] = c < d ? (int)(rnd_u32() % 5) - 2 : 0;
                V[r][c] = c < d ? (int)(rnd_u32() % 5) - 2 : 0;
                ks[8 * tsr_fa2_smem(r, c / 8, LDC) + c % 8] = to_f16((float)K[r][c]);
                vs[8 * tsr_fa2_smem(r, c / 8, LDC) + c % 8] = to_f16((float)V[r][c]);
            }
        uint32_t qa[10][32][4], x[32][4], b0[32], b1[32];
        int addr[32];
        static float s[32][32], o[32][80];
        memset(s, 0, sizeof s);
        memset(o, 0, sizeof o);
        for (int kk = 0; kk < KQ; kk++) {
            for (int lane = 0; lane < 32; lane++)
                addr[lane] = 8 * tsr_fa2_smem(tsr_fa2_ldm_q_row(lane, 0),
                                              tsr_fa2_ldm_q_chunk(lane, kk), LDC);
            emu_ldm(qa[kk], qs, addr, 4, 0);
        }
        float c[32][4];
        for (int kk = 0; kk < KQ; kk++)
            for (int jp = 0; jp < NT / 2; jp++) {
                for (int lane = 0; lane < 32; lane++)
                    addr[lane] = 8 * tsr_fa2_smem(tsr_fa2_ldm_k_row(lane, jp),
                                                  tsr_fa2_ldm_k_chunk(lane, kk), LDC);
                emu_ldm(x, ks, addr, 4, 0);
                for (int u = 0; u < 2; u++) {
                    b_regs(x, u, b0, b1);
                    for (int lane = 0; lane < 32; lane++)
                        memcpy(c[lane], &s[lane][4 * (2 * jp + u)], sizeof c[lane]);
                    ASSERT_EQ(emu_mma(c, (const uint32_t(*)[4])qa[kk], b0, b1), 0);
                    for (int lane = 0; lane < 32; lane++)
                        memcpy(&s[lane][4 * (2 * jp + u)], c[lane], sizeof c[lane]);
                }
            }
        /* S against the triple loop, through the header's C map */
        int S[16][64];
        for (int r = 0; r < 16; r++)
            for (int j = 0; j < BK; j++) {
                S[r][j] = 0;
                for (int cc = 0; cc < DK; cc++)
                    S[r][j] += Q[r][cc] * K[j][cc];
            }
        for (int lane = 0; lane < 32; lane++)
            for (int j = 0; j < NT; j++)
                for (int i = 0; i < 4; i++)
                    ASSERT_EQ((int)s[lane][4 * j + i],
                              S[tsr_fa2_c_row(lane, i)][8 * j + tsr_fa2_c_col(lane, i)]);
        /* O = P V with P = S (integers up to 4 * 160: exact in f16) */
        for (int kk = 0; kk < KP; kk++) {
            uint32_t a[32][4];
            for (int lane = 0; lane < 32; lane++)
                for (int r = 0; r < 4; r++)
                    a[lane][r] = pack2(to_f16(s[lane][tsr_fa2_p_src(kk, r, 0)]),
                                       to_f16(s[lane][tsr_fa2_p_src(kk, r, 1)]));
            for (int np = 0; np < (NO + 1) / 2; np++) {
                const int nmat = 2 * np + 1 < NO ? 4 : 2;
                for (int lane = 0; lane < 32; lane++)
                    addr[lane] = 8 * tsr_fa2_smem(tsr_fa2_ldm_v_row(lane, kk),
                                                  tsr_fa2_ldm_v_chunk(lane, np), LDC);
                emu_ldm(x, vs, addr, nmat, 1);
                for (int u = 0; u < nmat / 2; u++) {
                    b_regs(x, u, b0, b1);
                    for (int lane = 0; lane < 32; lane++)
                        memcpy(c[lane], &o[lane][4 * (2 * np + u)], sizeof c[lane]);
                    ASSERT_EQ(emu_mma(c, (const uint32_t(*)[4])a, b0, b1), 0);
                    for (int lane = 0; lane < 32; lane++)
                        memcpy(&o[lane][4 * (2 * np + u)], c[lane], sizeof c[lane]);
                }
            }
        }
        for (int lane = 0; lane < 32; lane++)
            for (int n = 0; n < NO; n++)
                for (int i = 0; i < 4; i++) {
                    const int r = tsr_fa2_c_row(lane, i), col = 8 * n + tsr_fa2_c_col(lane, i);
                    long want = 0;
                    for (int j = 0; j < BK; j++)
                        want += (long)S[r][j] * V[j][col];
                    ASSERT_EQ((long)o[lane][4 * n + i], want);
                }
        free(qs);
        free(ks);
        free(vs);
    }
    return 0;
}

/* ---- flash_blocks: the kernel, block by block ---- */

typedef struct fa2_problem {
    int b, heads, d, lq, lk, causal;
    const uint16_t *q, *k, *v; /* f16 bits, [b, l, heads*d] */
    uint16_t *y;
    float sl2;
} fa2_problem;

/* cp.async of 16 bytes: copy, or zero fill */
static void emu_cp16(uint16_t *smem, int chunk, const uint16_t *src, int full)
{
    for (int e = 0; e < 8; e++)
        smem[8 * chunk + e] = full ? src[e] : 0;
}

/* One thread block (blockIdx.x = bx, blockIdx.y = bh) of k_attention_fa2,
 * step for step; smem starts as NaN. */
static int emu_block(const fa2_problem *P, int bx, int bh, uint16_t *smem)
{
    const int D = P->d, DK = TSR_FA2_DK(D), BK = TSR_FA2_BK(D), LDC = TSR_FA2_LDC(D);
    const int CD = D / 8, CQ = DK / 8, NT = BK / 8, NO = D / 8, KQ = DK / 16, KP = BK / 16;
    const int ROWS = TSR_FA2_ROWS, lq = P->lq, lk = P->lk, heads = P->heads;
    for (size_t i = 0; i < tsr_fa2_smem_bytes(D) / 2; i++)
        smem[i] = 0x7e00u; /* NaN */
    uint16_t *qs = smem, *ks = qs + 8 * ROWS * LDC, *vs = ks + 8 * 2 * BK * LDC;
    const int bi = bh / heads, h = bh % heads, q0 = bx * ROWS;
    const int64_t hd = (int64_t)heads * D;
    const uint16_t *qg = P->q + (int64_t)bi * lq * hd + (int64_t)h * D;
    const uint16_t *kg = P->k + (int64_t)bi * lk * hd + (int64_t)h * D;
    const uint16_t *vg = P->v + (int64_t)bi * lk * hd + (int64_t)h * D;
    const int last_q = (q0 + ROWS < lq ? q0 + ROWS : lq) - 1;
    const int kend = P->causal ? (int)tsr_cu_causal_keys(last_q, lq, lk) : lk;
    const int ntiles = (kend + BK - 1) / BK;

    if (CQ > CD)
        for (int e = 0; e < (ROWS + 2 * BK) * (CQ - CD); e++) {
            const int r = e / (CQ - CD), c = CD + e % (CQ - CD);
            memset(qs + 8 * tsr_fa2_smem(r, c, LDC), 0, 16);
        }
    for (int e = 0; e < ROWS * CD; e++) {
        const int r = e / CD, c = e % CD, qi = q0 + r, in = qi < lq;
        emu_cp16(qs, tsr_fa2_smem(r, c, LDC), qg + (in ? (int64_t)qi * hd + 8 * c : 0), in);
    }
    /* the kernel's second buffer is loaded while the first is used; here
     * the tiles are simply loaded in order into buffer t & 1 */
    static float s[TSR_FA2_WARPS][32][32], o[TSR_FA2_WARPS][32][80];
    static float m[TSR_FA2_WARPS][32][2], l[TSR_FA2_WARPS][32][2];
    static uint32_t qa[TSR_FA2_WARPS][10][32][4];
    for (int w = 0; w < TSR_FA2_WARPS; w++)
        for (int lane = 0; lane < 32; lane++) {
            for (int i = 0; i < 4 * NO; i++)
                o[w][lane][i] = 0.0f;
            m[w][lane][0] = m[w][lane][1] = -INFINITY;
            l[w][lane][0] = l[w][lane][1] = 0.0f;
        }
    uint32_t x[32][4], b0[32], b1[32];
    int addr[32];
    float c[32][4];
    for (int t = 0; t < ntiles; t++) {
        const int k0 = t * BK, buf = (t & 1) * BK * LDC;
        for (int e = 0; e < BK * CD; e++) {
            const int r = e / CD, cc = e % CD, kj = k0 + r, in = kj < lk;
            const int64_t off = in ? (int64_t)kj * hd + 8 * cc : 0;
            emu_cp16(ks, buf + tsr_fa2_smem(r, cc, LDC), kg + off, in);
            emu_cp16(vs, buf + tsr_fa2_smem(r, cc, LDC), vg + off, in);
        }
        const uint16_t *kb = ks + 8 * buf, *vb = vs + 8 * buf;
        for (int w = 0; w < TSR_FA2_WARPS; w++) {
            const int row0 = q0 + 16 * w;
            if (t == 0)
                for (int kk = 0; kk < KQ; kk++) {
                    for (int lane = 0; lane < 32; lane++)
                        addr[lane] = 8 * tsr_fa2_smem(tsr_fa2_ldm_q_row(lane, w),
                                                      tsr_fa2_ldm_q_chunk(lane, kk), LDC);
                    emu_ldm(qa[w][kk], qs, addr, 4, 0);
                }
            for (int lane = 0; lane < 32; lane++)
                for (int i = 0; i < 4 * NT; i++)
                    s[w][lane][i] = 0.0f;
            for (int kk = 0; kk < KQ; kk++)
                for (int jp = 0; jp < NT / 2; jp++) {
                    for (int lane = 0; lane < 32; lane++)
                        addr[lane] = 8 * tsr_fa2_smem(tsr_fa2_ldm_k_row(lane, jp),
                                                      tsr_fa2_ldm_k_chunk(lane, kk), LDC);
                    emu_ldm(x, kb, addr, 4, 0);
                    for (int u = 0; u < 2; u++) {
                        b_regs(x, u, b0, b1);
                        for (int lane = 0; lane < 32; lane++)
                            memcpy(c[lane], &s[w][lane][4 * (2 * jp + u)], sizeof c[lane]);
                        ASSERT_EQ(emu_mma(c, (const uint32_t(*)[4])qa[w][kk], b0, b1), 0);
                        for (int lane = 0; lane < 32; lane++)
                            memcpy(&s[w][lane][4 * (2 * jp + u)], c[lane], sizeof c[lane]);
                    }
                }
            const int needs = tsr_fa2_tile_needs_mask(row0, k0, BK, lq, lk, P->causal);
            float mx[32][2], red[32][2];
            for (int lane = 0; lane < 32; lane++) {
                if (needs)
                    tsr_fa2_mask(s[w][lane], NT, lane, row0, k0, lq, lk, P->causal);
                tsr_fa2_lane_max(s[w][lane], NT, mx[lane]);
            }
            for (int sh = 1; sh <= 2; sh <<= 1) { /* __shfl_xor_sync 1, then 2 */
                for (int lane = 0; lane < 32; lane++)
                    for (int r = 0; r < 2; r++)
                        red[lane][r] = fmaxf(mx[lane][r], mx[lane ^ sh][r]);
                memcpy(mx, red, sizeof mx);
            }
            for (int lane = 0; lane < 32; lane++)
                tsr_fa2_update(s[w][lane], NT, o[w][lane], NO, m[w][lane], l[w][lane], mx[lane],
                               P->sl2);
            for (int kk = 0; kk < KP; kk++) {
                uint32_t a[32][4];
                for (int lane = 0; lane < 32; lane++)
                    for (int r = 0; r < 4; r++)
                        a[lane][r] = pack2(to_f16(s[w][lane][tsr_fa2_p_src(kk, r, 0)]),
                                           to_f16(s[w][lane][tsr_fa2_p_src(kk, r, 1)]));
                for (int np = 0; np < (NO + 1) / 2; np++) {
                    const int nmat = 2 * np + 1 < NO ? 4 : 2;
                    for (int lane = 0; lane < 32; lane++)
                        addr[lane] = 8 * tsr_fa2_smem(tsr_fa2_ldm_v_row(lane, kk),
                                                      tsr_fa2_ldm_v_chunk(lane, np), LDC);
                    emu_ldm(x, vb, addr, nmat, 1);
                    for (int u = 0; u < nmat / 2; u++) {
                        b_regs(x, u, b0, b1);
                        for (int lane = 0; lane < 32; lane++)
                            memcpy(c[lane], &o[w][lane][4 * (2 * np + u)], sizeof c[lane]);
                        ASSERT_EQ(emu_mma(c, (const uint32_t(*)[4])a, b0, b1), 0);
                        for (int lane = 0; lane < 32; lane++)
                            memcpy(&o[w][lane][4 * (2 * np + u)], c[lane], sizeof c[lane]);
                    }
                }
            }
        }
    }
    /* the output */
    for (int w = 0; w < TSR_FA2_WARPS; w++) {
        float lsum[32][2], inv[32][2];
        for (int lane = 0; lane < 32; lane++)
            for (int r = 0; r < 2; r++)
                lsum[lane][r] = l[w][lane][r];
        for (int sh = 1; sh <= 2; sh <<= 1) {
            float red[32][2];
            for (int lane = 0; lane < 32; lane++)
                for (int r = 0; r < 2; r++)
                    red[lane][r] = lsum[lane][r] + lsum[lane ^ sh][r];
            memcpy(lsum, red, sizeof lsum);
        }
        for (int lane = 0; lane < 32; lane++)
            for (int r = 0; r < 2; r++)
                inv[lane][r] = tsr_fa2_inv_sum(lsum[lane][r]);
        for (int lane = 0; lane < 32; lane++)
            for (int n = 0; n < NO; n++)
                for (int r = 0; r < 2; r++) {
                    const int row = 16 * w + tsr_fa2_c_row(lane, 2 * r);
                    const int col = 8 * n + tsr_fa2_c_col(lane, 2 * r);
                    uint16_t *at = qs + 8 * tsr_fa2_smem(row, col / 8, LDC) + col % 8;
                    at[0] = to_f16(o[w][lane][4 * n + 2 * r] * inv[lane][r]);
                    at[1] = to_f16(o[w][lane][4 * n + 2 * r + 1] * inv[lane][r]);
                }
        const int row0 = q0 + 16 * w;
        for (int e = 0; e < 16 * CD; e++) {
            const int r = e / CD, cc = e % CD, qi = row0 + r;
            if (qi < lq)
                memcpy(P->y + ((int64_t)bi * lq + qi) * hd + (int64_t)h * D + 8 * cc,
                       qs + 8 * tsr_fa2_smem(16 * w + r, cc, LDC), 16);
        }
    }
    return 0;
}

static tsr_backend *cpu(void)
{
    static tsr_backend *b;
    if (!b && tsr_backend_cpu_create(2, &b) < 0)
        return NULL;
    return b;
}

static int test_flash_blocks(void)
{
    const struct {
        int b, heads, d, lq, lk, causal;
        float amp;
    } cs[] = {
        /* clang-format off */
        {1, 2, 40, 77, 77, 0, 2.0f},   /* one tile, key tail; a block's rows past lq */
        {2, 2, 40, 130, 200, 0, 2.5f}, /* several tiles: the running max moves */
        {1, 2, 40, 70, 77, 0, 2.0f},   /* cross-attention-like */
        {2, 3, 64, 77, 77, 1, 2.5f},   /* the text encoders' causal self-attention */
        {1, 2, 64, 50, 77, 1, 2.0f},   /* causal, lq < lk */
        {1, 2, 64, 200, 10, 1, 2.0f},  /* causal, lq > lk: rows with no key, empty blocks */
        {1, 1, 64, 64, 129, 0, 3.0f},  /* a 1-key last tile */
        {1, 2, 80, 100, 150, 0, 2.5f},
        {1, 2, 80, 70, 70, 1, 2.0f},
        {1, 2, 160, 64, 77, 0, 2.0f},  /* 32-key tiles */
        {1, 1, 160, 70, 100, 1, 2.0f},
        {1, 1, 40, 3, 1, 0, 2.0f},     /* one key */
        /* clang-format on */
    };
    ASSERT_TRUE(cpu());
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int b = cs[ci].b, heads = cs[ci].heads, d = cs[ci].d, lq = cs[ci].lq, lk = cs[ci].lk;
        const int64_t hd = (int64_t)heads * d;
        const size_t nq = (size_t)b * lq * hd, nk = (size_t)b * lk * hd;
        uint16_t *q = malloc(nq * 2), *k = malloc(nk * 2), *v = malloc(nk * 2), *y = malloc(nq * 2);
        float *qf = malloc(nq * 4), *kf = malloc(nk * 4), *vf = malloc(nk * 4);
        float *want = malloc(nq * 4), *got = malloc(nq * 4);
        uint16_t *smem = malloc(tsr_fa2_smem_bytes(d));
        ASSERT_TRUE(q && k && v && y && qf && kf && vf && want && got && smem);
        for (size_t i = 0; i < nq; i++) {
            q[i] = to_f16(rnd_uniform(cs[ci].amp));
            qf[i] = f16(q[i]);
            y[i] = 0x7e00u; /* NaN: an element the kernel forgets fails */
        }
        for (size_t i = 0; i < nk; i++) {
            k[i] = to_f16(rnd_uniform(cs[ci].amp));
            kf[i] = f16(k[i]);
            v[i] = to_f16(rnd_uniform(1.0f));
            vf[i] = f16(v[i]);
        }
        const float scale = 1.0f / sqrtf((float)d);
        fa2_problem P = {
            b, heads, d, lq, lk, cs[ci].causal, q, k, v, y, scale * 1.4426950408889634f};
        for (int bh = 0; bh < b * heads; bh++)
            for (int bx = 0; bx < (lq + TSR_FA2_ROWS - 1) / TSR_FA2_ROWS; bx++)
                ASSERT_EQ(emu_block(&P, bx, bh, smem), 0);
        for (size_t i = 0; i < nq; i++)
            got[i] = f16(y[i]);
        const int64_t qe[3] = {b, lq, hd}, ke[3] = {b, lk, hd};
        tsr_tensor tq = tsr_tensor_make(TSR_F32, 3, qe, qf, cpu());
        tsr_tensor tk = tsr_tensor_make(TSR_F32, 3, ke, kf, cpu());
        tsr_tensor tv = tsr_tensor_make(TSR_F32, 3, ke, vf, cpu());
        tsr_tensor ty = tsr_tensor_make(TSR_F32, 3, qe, want, cpu());
        tsr_attention_params p = {.heads = heads, .scale = 0.0f, .causal = cs[ci].causal != 0};
        ASSERT_OK(tsr_attention(cpu(), &tq, &tk, &tv, &p, &ty));
        /* rows that see no key are exactly 0 */
        for (int bi = 0; bi < b; bi++)
            for (int qi = 0; qi < lq; qi++)
                if (cs[ci].causal && tsr_cu_causal_keys(qi, lq, lk) == 0)
                    for (int64_t e = 0; e < hd; e++) {
                        ASSERT_TRUE(got[((int64_t)bi * lq + qi) * hd + e] == 0.0f);
                        ASSERT_TRUE(want[((int64_t)bi * lq + qi) * hd + e] == 0.0f);
                    }
        char what[96];
        snprintf(what, sizeof what, "fa2 emulation b%d h%d d%d %dx%d%s", b, heads, d, lq, lk,
                 cs[ci].causal ? " causal" : "");
        ASSERT_CLOSE(what, got, want, nq, 3e-3);
        double emax = 0.0, rmax = 0.0;
        for (size_t i = 0; i < nq; i++) {
            emax = fmax(emax, fabs((double)got[i] - want[i]));
            rmax = fmax(rmax, fabs((double)want[i]));
        }
        printf("%-40s max error %.2e of max |ref| %.3f\n", what, emax / (rmax > 0 ? rmax : 1),
               rmax);
        free(q);
        free(k);
        free(v);
        free(y);
        free(qf);
        free(kf);
        free(vf);
        free(want);
        free(got);
        free(smem);
    }
    return 0;
}

static const tsr_test_entry tests[] = {
    {"fragment_maps", test_fragment_maps}, {"ldmatrix_maps", test_ldmatrix_maps},
    {"smem_layout", test_smem_layout},     {"warp_products", test_warp_products},
    {"flash_blocks", test_flash_blocks},
};

TSR_TEST_TABLE_MAIN(tests)
