/*
 * cli/bench_peak.c - `tessera bench peak`: the CPU's measured multiply-add
 * ceiling, per instruction kind, on one thread and on N at once; and the
 * ceiling `tessera bench ops` reports each op against.
 *
 * Why: "GFLOP/s" alone cannot say whether a kernel can still be made
 * faster.  On one 2-core VM an AVX-512 FMA may be worth the same as AVX2's
 * (Zen 4 splits it in two), on the next twice (Zen 5); clocks move with
 * load and host.  docs/perf.md states every CPU figure against this one
 * (backend/cpu/cpu_peak.c has the method).
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_isa.h"
#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "core/pool.h"

/* The ceiling that bounds backend `be`'s GEMMs: the FMA of its vector
 * level, or the bf16 dot for bf16 weights; false for a GPU backend. */
bool tsr_bench_backend_peak(const tsr_backend *be, int threads, double *gflops,
                            const char **kind_name)
{
    if (be->kind != TSR_BACKEND_CPU)
        return false;
    tsr_cpu_peak_kind kind = TSR_CPU_PEAK_SCALAR;
    if (tsr_backend_weight_dtype(be) == TSR_BF16 && tsr_cpu_has_bf16_dot())
        kind = TSR_CPU_PEAK_BF16;
    else if (tsr_cpu_isa() == TSR_CPU_ISA_AVX512)
        kind = TSR_CPU_PEAK_AVX512;
    else if (tsr_cpu_isa() == TSR_CPU_ISA_AVX2)
        kind = TSR_CPU_PEAK_AVX2;
    *gflops = tsr_cpu_peak_gflops(kind, threads, 0.2);
    *kind_name = tsr_cpu_peak_name(kind);
    return *gflops > 0;
}

int tsr_bench_peak(int argc, char **argv)
{
    int64_t threads = 0;
    double seconds = 0.5;
    bool json = false;
    const tsr_arg_spec specs[] = {
        {"threads", TSR_ARG_INT, &threads, "N",
         "threads for the all-threads figure (0 = all cores)", 0, TSR_CPU_PEAK_MAX_THREADS, 0, 0},
        {"seconds", TSR_ARG_FLOAT, &seconds, "S", "seconds per measurement (default 0.5)", 0, 0,
         0.01, 60},
        {"json", TSR_ARG_FLAG, &json, NULL, "print JSON instead of a table", 0, 0, 0, 0},
    };
    const tsr_cli_command cmd = {
        .name = "bench peak",
        .synopsis = "bench peak [--threads N] [--seconds S] [--json]",
        .summary = "measure the CPU's multiply-add ceiling per instruction kind",
        .description = "Runs register-only chains of fused multiply-adds (and AVX512_BF16 dot\n"
                       "products) on one thread, then on N threads at once, and prints GFLOP/s\n"
                       "(2 flops per multiply-add): the ceiling that `tessera bench ops`\n"
                       "reports every op against.  TESSERA_CPU_ISA caps the kinds measured.",
        .specs = specs,
        .n_specs = (int)(sizeof specs / sizeof specs[0]),
    };
    int rc = tsr_args_parse(&cmd, argc, argv, NULL, 0, NULL);
    if (rc == TSR_ARGS_HELP)
        return TSR_EXIT_OK;
    if (rc < 0)
        return TSR_EXIT_USAGE;
    const int n = threads > 0 ? (int)threads : tsr_cpu_count();
    if (json)
        printf("{\"threads\": %d, \"vector_level\": \"%s\", \"results\": [", n,
               tsr_cpu_isa_name(tsr_cpu_isa()));
    else
        printf("vector level %s; %d thread(s) for the all-threads column\n\n%-18s %14s %14s\n",
               tsr_cpu_isa_name(tsr_cpu_isa()), n, "kind", "1 thread", "all threads");
    int printed = 0;
    const tsr_cpu_peak_kind kinds[] = {TSR_CPU_PEAK_SCALAR, TSR_CPU_PEAK_AVX2, TSR_CPU_PEAK_AVX512,
                                       TSR_CPU_PEAK_BF16};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (!tsr_cpu_peak_available(kinds[i]))
            continue;
        const double one = tsr_cpu_peak_gflops(kinds[i], 1, seconds);
        const double all = tsr_cpu_peak_gflops(kinds[i], n, seconds);
        if (one <= 0 || all <= 0) {
            fprintf(stderr, "tessera bench peak: could not start %d threads\n", n);
            return TSR_EXIT_FAILURE;
        }
        if (json)
            printf("%s\n  {\"kind\": \"%s\", \"gflops_1\": %.2f, \"gflops_all\": %.2f}",
                   printed ? "," : "", tsr_cpu_peak_name(kinds[i]), one, all);
        else
            printf("%-18s %9.1f GF/s %9.1f GF/s\n", tsr_cpu_peak_name(kinds[i]), one, all);
        printed++;
        fflush(stdout);
    }
    if (json)
        printf("\n]}\n");
    return TSR_EXIT_OK;
}
