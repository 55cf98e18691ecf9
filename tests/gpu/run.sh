#!/usr/bin/env bash
# tests/gpu/run.sh - the one prepared check for a GPU machine (the device
# tool runs it in the repository root, with tests/gpu/prepared/ carried from
# tests/gpu/prepare.sh).  Sized for one run of at most ~8 minutes on an
# H100/H200-class card; every stage has its own time limit, a failing stage
# does not stop the later ones, and a compact table is printed last.
#
#   deps     the build's dependencies: the machine's own where present, else
#            the Debian packages of tests/gpu/prepared unpacked (dpkg -x) into
#            build-gpu/prefix; cuDNN from the toolkit or the nvidia-cudnn wheel
#   gpu      stop here, cleanly (exit 77), when there is no usable GPU
#   build    cmake + ninja with the CUDA backend for this GPU's architecture
#   gpu_unit ctest -L gpu: memory/events/auto, and every op at SD1.5/SD2.x/
#            SDXL shapes against the CPU backend (gpu_ops_*, 3e-3, NaN fails);
#            the nccl comm on one rank (gpu_comm_nccl_one_rank, tests/comm);
#            CFG-parallel over two engines on the GPU against one engine
#            (gpu_cfg_parallel, >= 35 dB; docs/multi-gpu.md section 6)
#   replica  weights by broadcast (docs/multi-gpu.md part 2): a replica of a
#            cuda:0 engine on cuda:0 through a one-rank NCCL group (NCCL
#            refuses two ranks on one GPU, so rank 0 is the replica and its
#            broadcast an NCCL copy from the source's arenas), its images
#            against the source's (>= 45 dB; byte-identical expected), again
#            with the source closed; with a second GPU also cuda:1 by two
#            ranks (engine_replica_gpu_one_rank, tests/pipeline/test_replica.c)
#   ops      the op golden cases of tests/ops with TSR_TEST_DEVICE=cuda
#   golden   tiny models of tests/data end to end on the GPU against their
#            goldens (PSNR >= 35 dB)
#   demo     models/demo: GPU image against CPU image, PSNR >= 35 dB, several
#            prompts, sizes and samplers
#   rng      --rng cuda's noise against torch.randn on a CUDA generator
#   timing   random-weight SD1.5/SDXL models (made here by
#            make_random_model.py): UNet s/call at 512^2/1024^2, 1 and 16
#            images with CFG; VAE decode; peak GPU memory; PyTorch FP16 SDPA
#            (and the diffusers UNet, if installed) at the same shapes;
#            attention's ops under each path (TSR_CUDA_ATTENTION=cudnn|wmma|
#            gemm|flash: `bench ops --filter attention`; the cudnn run logs
#            cuDNN's plan or refusal per shape), and the SD1.5 b16 UNet
#            with TSR_CUDA_ATTENTION=cudnn and =fa2 beside the default
#            (docs/perf.md's run 2, 0.284 s)
#   serve    tessera serve on the GPU under load: tools/loadtest/bench.sh's
#            "batch" scenario on the demo model (16 clients, max batch 1
#            against 16), no job may fail
#   serve_sd15 the same on the random full-size SD1.5 model at 512x512
# Logs: every stage's full output under $OUT/gpu-logs (or build-gpu/logs).
# cuDNN's fused SDPA attention (backend/cuda/ops_attention_cudnn.cu,
# TSR_CUDA_ATTENTION=cudnn, opt-in) is unverified until this runs on a GPU:
# gpu_unit's gpu_ops_attention_cudnn and gpu_ops_attention_sd_cudnn check it
# at every SD shape (strict), timing's bench_ops_cudnn.log times it.
# The FA2 kernel (backend/cuda/ops_attention_fa2.cu, TSR_CUDA_ATTENTION=fa2,
# opt-in) likewise: gpu_ops_attention_fa2 and gpu_ops_attention_sd_fa2
# (forced, strict), bench_ops_fa2.log and the "fa2-att" UNet rows.
#
# Environment: TSR_GPU_SKIP="timing demo" skips stages; TSR_GPU_BUILD_ONLY=1
# (for a machine without a GPU) runs deps and build and then stops;
# TSR_GPU_FORCE_PREFIX=1 uses the prepared packages even where the machine
# has its own; TSR_GPU_ARCH overrides CMAKE_CUDA_ARCHITECTURES;
# TSR_GPU_DEVICE=cpu-f16 (default cuda) runs the stages on another device
# without asking for a GPU: how the script itself was checked on a machine
# without one (the timing stage then needs the random models' CPU time).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
T_START=$(date +%s)
BUILD=build-gpu
LOGS=${OUT:+$OUT/gpu-logs}
LOGS=${LOGS:-$ROOT/$BUILD/logs}
PREP=tests/gpu/prepared
PREFIX=$ROOT/$BUILD/prefix
MODELS=$ROOT/$BUILD/models
JOBS=$(nproc)
PY=$(command -v python3 || command -v python || echo python3)
mkdir -p "$LOGS" "$BUILD"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"

say() { printf 'run.sh: %s\n' "$*"; }
elapsed() { echo $(($(date +%s) - T_START)); }
# result STAGE STATUS DETAIL: one row of the final table
result() {
    printf '%-10s %-5s %s\n' "$1" "$2" "$3" >>"$SUMMARY"
    say "[$1] $2 $3 (t=$(elapsed)s)"
}
# The whole run must end inside the device tool's 10-minute command limit:
# a stage that would not fit in what is left of TSR_GPU_BUDGET (s) is
# skipped and says so in the table.
BUDGET=${TSR_GPU_BUDGET:-540}
skipped() {
    case " ${TSR_GPU_SKIP:-} " in *" $1 "*) return 0 ;; esac
    if [ -n "${2:-}" ] && [ $(($(elapsed) + $2)) -gt "$BUDGET" ]; then
        result "$1" skip "no time left in the ${BUDGET} s budget (t=$(elapsed)s, needs ~$2 s)"
        return 0
    fi
    return 1
}
table() {
    echo
    echo "==================== tests/gpu/run.sh summary ($(elapsed) s) ===================="
    printf '%-10s %-5s %s\n' STAGE RESULT DETAIL
    cat "$SUMMARY"
    echo "logs: $LOGS"
}

# ---- deps: toolchain and libraries ----
PKGS="libcjson openblas libpng libjpeg libevent libevent_pthreads libturbojpeg hiredis openssl"
missing=""
for t in cmake ninja pkg-config; do command -v $t >/dev/null || missing="$missing $t"; done
if command -v pkg-config >/dev/null; then
    for p in $PKGS; do pkg-config --exists $p || missing="$missing $p"; done
fi
if [ -n "$missing" ] || [ "${TSR_GPU_FORCE_PREFIX:-0}" = 1 ]; then
    if ! ls "$PREP"/debs/lib/*.deb >/dev/null 2>&1; then
        result deps FAIL "missing:$missing, and no $PREP (run tests/gpu/prepare.sh on a machine with apt)"
        table
        exit 1
    fi
    rm -rf "$PREFIX"
    mkdir -p "$PREFIX"
    # pkg-config alone is small (debs/pkgconf); cmake and ninja with their
    # closure (debs/tools) are carried only where the machine lacks them, as
    # the tree and both sets together pass the device tool's 64 MiB
    sets=lib
    command -v pkg-config >/dev/null || sets="$sets pkgconf"
    for t in cmake ninja; do command -v $t >/dev/null || sets="lib pkgconf tools"; done
    for s in $sets; do
        if ! ls "$PREP"/debs/$s/*.deb >/dev/null 2>&1; then
            result deps FAIL "missing:$missing, and $PREP/debs/$s was not carried"
            table
            exit 1
        fi
        for f in "$PREP"/debs/$s/*.deb; do
            if command -v dpkg-deb >/dev/null; then
                dpkg-deb -x "$f" "$PREFIX"
            else # no dpkg: a .deb is an ar archive holding data.tar.*
                (cd "$PREFIX" && ar p "$ROOT/$f" "$(ar t "$ROOT/$f" | grep '^data.tar')" | tar -xJ 2>/dev/null ||
                    ar p "$ROOT/$f" "$(ar t "$ROOT/$f" | grep '^data.tar')" | tar -x --zstd)
            fi
        done
    done
    # Debian's .pc files name /usr: point them at the prefix
    find "$PREFIX" -name '*.pc' -exec sed -i -E \
        "s#^(prefix|exec_prefix|libdir|includedir|sharedlibdir)=/usr#\1=$PREFIX/usr#" {} +
    MA=$PREFIX/usr/lib/x86_64-linux-gnu
    export PKG_CONFIG_PATH=$MA/pkgconfig:$MA/openblas-pthread/pkgconfig:$PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export CMAKE_PREFIX_PATH=$PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
    export LD_LIBRARY_PATH=$MA:$MA/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$PREFIX/usr/bin:$PATH
    DEPS="prepared packages in $PREFIX (missing here:${missing:- none, forced})"
else
    DEPS="the machine's own"
fi
# cuDNN: the toolkit's, else the nvidia-cudnn wheel's
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$PATH:$CUDA_HOME/bin
CUDNN_ROOT=${CUDNN_ROOT:-}
if [ -z "$CUDNN_ROOT" ]; then
    if [ -f "$CUDA_HOME/include/cudnn.h" ]; then
        CUDNN_ROOT=$CUDA_HOME
    else
        CUDNN_ROOT=$("$PY" -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
    fi
fi
if [ -n "$CUDNN_ROOT" ]; then
    export CUDNN_ROOT
    export LD_LIBRARY_PATH=$CUDNN_ROOT/lib:$CUDNN_ROOT/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# cuBLAS from a wheel too, where the toolkit has none
if ! ls "$CUDA_HOME"/lib64/libcublasLt.so* >/dev/null 2>&1; then
    CUBLAS_WHEEL=$("$PY" -c 'import nvidia.cublas as m; print(list(m.__path__)[0])' 2>/dev/null || true)
    [ -n "$CUBLAS_WHEEL" ] && export LD_LIBRARY_PATH=$CUBLAS_WHEEL/lib:$LD_LIBRARY_PATH
fi
# NCCL for the nccl comm (backend/comm/comm_nccl.c dlopens libnccl.so.2):
# the toolkit's or the loader's, else the nvidia-nccl wheel's
if [ -z "${TSR_NCCL_LIB:-}" ] && ! ls "$CUDA_HOME"/lib*/libnccl.so.2 >/dev/null 2>&1 &&
    ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
    NCCL_WHEEL=$("$PY" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
    [ -f "$NCCL_WHEEL/lib/libnccl.so.2" ] && export TSR_NCCL_LIB=$NCCL_WHEEL/lib/libnccl.so.2
fi
{
    echo "deps: $DEPS"
    echo "nvcc: $(command -v nvcc || echo none) $(nvcc --version 2>/dev/null | tail -1)"
    echo "cmake: $(cmake --version 2>/dev/null | head -1)  ninja: $(ninja --version 2>/dev/null)"
    echo "cudnn: ${CUDNN_ROOT:-none}  $(grep -h -E '#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ' "$CUDNN_ROOT"/include/cudnn_version.h 2>/dev/null | awk '{printf "%s ", $3}')"
    echo "torch: $("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>/dev/null || echo none)"
    echo "nccl: ${TSR_NCCL_LIB:-the toolkit's or the loader's path}"
    for p in $PKGS; do echo "pkg-config $p: $(pkg-config --modversion $p 2>/dev/null || echo missing) $(pkg-config --variable=libdir $p 2>/dev/null)"; done
} >"$LOGS/deps.log" 2>&1
cat "$LOGS/deps.log"
if [ -z "$CUDNN_ROOT" ]; then
    result deps FAIL "no cuDNN: neither $CUDA_HOME/include/cudnn.h nor the nvidia-cudnn wheel"
    table
    exit 1
fi
result deps ok "$DEPS; cuDNN $CUDNN_ROOT"

# ---- is there a GPU? ----
DEV=${TSR_GPU_DEVICE:-cuda}
GPU_WHY=""
if [ "$DEV" != cuda ] && [ "${DEV#cuda:}" = "$DEV" ]; then
    result gpu skip "TSR_GPU_DEVICE=$DEV: the stages run on $DEV (a check of this script)"
elif ! command -v nvidia-smi >/dev/null; then
    GPU_WHY="nvidia-smi is not installed (no NVIDIA driver)"
elif ! nvidia-smi -L >"$LOGS/gpu.log" 2>&1; then
    GPU_WHY="nvidia-smi finds no GPU: $(head -1 "$LOGS/gpu.log")"
elif ! grep -q '^GPU ' "$LOGS/gpu.log"; then
    GPU_WHY="nvidia-smi lists no GPU"
fi
if [ "$DEV" != cuda ] && [ "${DEV#cuda:}" = "$DEV" ]; then
    : # no GPU asked for
elif [ -n "$GPU_WHY" ]; then
    result gpu none "$GPU_WHY"
    if [ "${TSR_GPU_BUILD_ONLY:-0}" != 1 ]; then
        say "no GPU on this machine ($GPU_WHY): nothing to check here; the build and every GPU stage need one"
        table
        exit 77
    fi
else
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader | tee -a "$LOGS/gpu.log"
    result gpu ok "$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | head -1)"
fi

# ---- random full-size models, made in the background while we build ----
if [ -z "$GPU_WHY" ] && ! skipped timing; then
    mkdir -p "$MODELS"
    (for a in sd15 sdxl; do
        [ -f "$MODELS/$a/unet/diffusion_pytorch_model.safetensors" ] ||
            "$PY" tests/gpu/make_random_model.py --arch $a --out "$MODELS/$a" || exit 1
    done) >"$LOGS/models.log" 2>&1 &
    MODELS_PID=$!
fi

# ---- build ----
ARCH=${TSR_GPU_ARCH:-}
if [ -z "$ARCH" ]; then
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
    ARCH=${cc:-90}
fi
t0=$(date +%s)
if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCUDNN_ROOT="$CUDNN_ROOT" >"$LOGS/build.log" 2>&1 &&
    ninja -C "$BUILD" -j"$JOBS" >>"$LOGS/build.log" 2>&1; then
    result build ok "sm_$ARCH in $(($(date +%s) - t0)) s"
else
    result build FAIL "see $LOGS/build.log: $(grep -m1 -E 'error|Error' "$LOGS/build.log")"
    tail -30 "$LOGS/build.log"
    table
    exit 1
fi
BIN=$ROOT/$BUILD/bin/tessera
GC=$ROOT/$BUILD/tests/gpucheck
if [ -n "$GPU_WHY" ]; then
    say "built without a GPU (TSR_GPU_BUILD_ONLY=1); the GPU stages need one: $GPU_WHY"
    table
    exit 77
fi

# ---- gpu_unit: memory, events, every op at SD shapes ----
if ! skipped gpu_unit 120; then
    timeout 240 ctest --test-dir "$BUILD" -L gpu -E '^engine_replica_gpu_' -j4 --output-on-failure \
        >"$LOGS/gpu_unit.log" 2>&1
    fails=$(grep -E '^[a-z_ ]+ .+ FAIL$' "$LOGS/gpu_unit.log" | sed -E 's/ +/ /g' | head -8 | paste -sd ';')
    line=$(grep -E 'tests passed' "$LOGS/gpu_unit.log" | tail -1)
    case "$line" in *"100% tests passed"*) st=ok ;; *) st=FAIL ;; esac
    # on a GPU nothing may skip: a skip means the device could not be opened
    [ $st = ok ] && grep -q '(Skipped)' "$LOGS/gpu_unit.log" && st=FAIL
    result gpu_unit "$st" "${line:-timeout} ${fails:+; failing shapes: $fails}"
fi

# ---- replica: weights by broadcast, one NCCL rank on cuda:0 ----
if ! skipped replica 30; then
    timeout 120 ctest --test-dir "$BUILD" -R '^engine_replica_gpu_one_rank$' -V >"$LOGS/replica.log" 2>&1
    line=$(grep -E 'tests passed' "$LOGS/replica.log" | tail -1)
    case "$line" in *"100% tests passed"*) st=ok ;; *) st=FAIL ;; esac
    grep -q '(Skipped)' "$LOGS/replica.log" && st=FAIL # a GPU is here: nothing may skip
    worst=$(grep -oE 'psnr [0-9.inf]+ dB, max diff [0-9]+' "$LOGS/replica.log" | sort -t' ' -k6 -n | tail -1)
    result replica "$st" "${line:-timeout}; worst image: ${worst:-none}; $(grep -c 'byte-identical' "$LOGS/replica.log") byte-identical"
fi

# ---- ops: the op golden cases on the GPU ----
if ! skipped ops 30; then
    TSR_TEST_DEVICE=$DEV timeout 120 ctest --test-dir "$BUILD" -R '^ops_' -E '^ops_(f16|bf16)_' \
        -j8 --output-on-failure >"$LOGS/ops.log" 2>&1
    line=$(grep -E 'tests passed' "$LOGS/ops.log" | tail -1)
    nskip=$(grep -c 'Skipped' "$LOGS/ops.log")
    case "$line" in *"100% tests passed"*) st=ok ;; *) st=FAIL ;; esac
    result ops "$st" "${line:-timeout}; $nskip skipped (refused ops are listed in the log)"
fi

# ---- golden: tiny models end to end on the GPU against their goldens ----
psnr_row() { # stage label got ref
    local r
    r=$("$GC" psnr "$3" "$4" 2>&1)
    local db
    db=$(echo "$r" | awk '/^psnr/{print $2}')
    echo "$2: $r" >>"$LOGS/$1.log"
    if [ -n "$db" ] && { [ "$db" = inf ] || awk -v d="$db" 'BEGIN{exit !(d >= 35)}'; }; then
        echo "ok $2=$db"
    else
        echo "FAIL $2=${db:-error}"
    fi
}
if ! skipped golden 60; then
    : >"$LOGS/golden.log"
    mkdir -p "$BUILD/golden"
    CASES="sd1_euler sd1_euler_a sd1_dpmpp_2m_karras sd1_ddim sd1_heun sd1_batch2_euler_a
           sd1_img2img_euler_a sd1_inpaint4_euler sd2v_euler sd2v_euler_a_rescale sdxl_euler
           sdxl_dpmpp_2m sdxl_img2img_euler turbo_1step_cfg0"
    rows=""
    nfail=0
    for c in $CASES; do
        args=$("$PY" - "$c" <<'PY'
import json, sys, shlex
m = json.load(open("tests/data/pipeline/manifest.json"))
for k in m["cases"]:
    if k["name"] == sys.argv[1]:
        print(shlex.join(k["args"] + k.get("extra_args", [])) + "\t" + " ".join(k["outputs"]))
PY
)
        [ -z "$args" ] && { echo "$c: not in the manifest" >>"$LOGS/golden.log"; continue; }
        outs=${args#*$'\t'}
        args=${args%%$'\t'*}
        rm -f "$BUILD/golden/$c"*.png
        eval "timeout 60 \"$BIN\" generate $args --device $DEV --output \"$BUILD/golden/$c.png\"" \
            >>"$LOGS/golden.log" 2>&1
        set -- $outs
        k=0
        for o in "$@"; do
            got=$BUILD/golden/$c.png
            [ $# -gt 1 ] && got=$BUILD/golden/$c-$k.png
            k=$((k + 1))
            r=$(psnr_row golden "${o%.png}" "$got" "tests/data/pipeline/$o")
            case "$r" in FAIL*) nfail=$((nfail + 1)) ;; esac
            rows="$rows ${r#* }"
        done
    done
    result golden "$([ $nfail = 0 ] && echo ok || echo FAIL)" "PSNR dB:$rows"
fi

# ---- demo: GPU image against CPU image ----
if ! skipped demo 90; then
    : >"$LOGS/demo.log"
    mkdir -p "$BUILD/demo"
    P=$("$PY" -c 'import json; h=json.load(open("tools/demo-model/heldout.json")); print("\n".join(p if isinstance(p, str) else p.get("prompt", "") for p in h["prompts"][:3]))')
    i=0
    rows=""
    nfail=0
    while IFS= read -r prompt; do
        for spec in "128 ddim 30" "192 euler_a 20" "128 dpmpp_2m 25"; do
            set -- $spec
            i=$((i + 1))
            for dev in cpu $DEV; do
                timeout 90 "$BIN" generate --model models/demo --prompt "$prompt" --width "$1" \
                    --height "$1" --sampler "$2" --steps "$3" --seed $((1000 + i)) --device $dev \
                    --output "$BUILD/demo/$i-$dev.png" >>"$LOGS/demo.log" 2>&1
            done
            r=$(psnr_row demo "d$i-$1-$2" "$BUILD/demo/$i-$DEV.png" "$BUILD/demo/$i-cpu.png")
            case "$r" in FAIL*) nfail=$((nfail + 1)) ;; esac
            rows="$rows ${r#* }"
        done
    done <<<"$P"
    result demo "$([ $nfail = 0 ] && echo ok || echo FAIL)" "PSNR dB:$rows"
fi

# ---- rng: --rng cuda against PyTorch ----
if skipped rng 30; then
    :
elif ! "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    result rng skip "no PyTorch with CUDA here"
else
    mkdir -p "$BUILD/rng"
    rm -f "$BUILD/rng"/*.f32
    for s in 0 42 1234567890123; do
        for n in 16384 65536; do "$GC" rng $s $n 0 "$BUILD/rng/${s}_${n}_0.f32"; done
    done
    # a tensor past any uncapped grid: which cap matches (reported, not failed)
    "$PY" -c 'import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)' >"$BUILD/rng/sms" 2>/dev/null
    SMS=$(cat "$BUILD/rng/sms")
    for k in 4 8; do "$GC" rng 7 4194304 $((SMS * k)) "$BUILD/rng/7_4194304_$((SMS * k)).f32"; done
    "$GC" rng 7 4194304 0 "$BUILD/rng/7_4194304_0.f32"
    if timeout 60 "$PY" tests/gpu/torch_bench.py rng "$BUILD/rng" >"$LOGS/rng.log" 2>&1; then st=ok; else st=FAIL; fi
    result rng "$st" "$(grep -c '"ok": true' "$LOGS/rng.log") of $(grep -c '"check": "rng"' "$LOGS/rng.log") match torch (large-tensor grid caps in the log)"
fi

# ---- timing ----
gpu_mem_watch() { # samples used memory every 100 ms into $1 until killed
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$1" 2>/dev/null
}
bench() { # label timeout tessera-args...
    local label=$1 to=$2
    shift 2
    if [ $(($(elapsed) + to)) -gt "$BUDGET" ]; then
        printf '%-28s %-12s\n' "$label" "skipped: no time left" >>"$LOGS/timing.table"
        return
    fi
    gpu_mem_watch "$LOGS/mem.$label" &
    local w=$!
    local js
    js=$(timeout "$to" "$BIN" --log-level warn bench "$@" --device $DEV --json 2>>"$LOGS/timing.log" | tail -1)
    kill $w 2>/dev/null
    wait $w 2>/dev/null
    local peak
    peak=$(sort -n "$LOGS/mem.$label" 2>/dev/null | tail -1)
    echo "$label $js" >>"$LOGS/timing.log"
    local v
    v=$(echo "$js" | "$PY" -c 'import json,sys
try:
    d = json.loads(sys.stdin.read())
    print(("%.3f s" % d["median_s"]) if "median_s" in d else ("%.1f ms" % d["decode_ms"]))
except Exception:
    print("FAILED (error or timeout: timing.log)")')
    printf '%-28s %-12s peak GPU %s MiB\n' "$label" "$v" "${peak:-?}" >>"$LOGS/timing.table"
}
if ! skipped timing 60; then
    : >"$LOGS/timing.log"
    : >"$LOGS/timing.table"
    if wait "$MODELS_PID"; then
        bench "sd15 unet 512 b1 cfg" 60 unet --model "$MODELS/sd15" --size 512 --batch 2 --iters 3
        # one row (one image's cond or uncond half): CFG-parallel's call,
        # which tools/sim/ can only extrapolate until this is measured
        bench "sd15 unet 512 1 row" 60 unet --model "$MODELS/sd15" --size 512 --batch 1 --iters 3
        bench "sd15 unet 512 b16 cfg" 90 unet --model "$MODELS/sd15" --size 512 --batch 32 --iters 1
        bench "sd15 unet 1024 b1 cfg" 90 unet --model "$MODELS/sd15" --size 1024 --batch 2 --iters 1
        bench "sd15 vae decode 512" 60 vae --model "$MODELS/sd15" --size 512 --iters 2
        bench "sdxl unet 1024 b1 cfg" 90 unet --model "$MODELS/sdxl" --size 1024 --batch 2 --iters 2
        bench "sdxl unet 1024 b16 cfg" 120 unet --model "$MODELS/sdxl" --size 1024 --batch 32 --iters 1
        bench "sdxl unet 1024 1 row" 60 unet --model "$MODELS/sdxl" --size 1024 --batch 1 --iters 2
        bench "sdxl vae decode 1024" 60 vae --model "$MODELS/sdxl" --size 1024 --iters 1
        timeout 60 "$BIN" --log-level warn bench ops --device $DEV >"$LOGS/bench_ops.log" 2>&1
        # attention's paths one by one at the same shapes
        # (backend/cuda/ops_attention.cu).  cudnn at debug level: its log
        # says per shape which cuDNN engine runs it, or why cuDNN refused it
        # (then the row is the fallback path's time; the VAE's 512-wide head
        # is never cuDNN's); cuDNN builds a plan on a shape's first call
        for path in cudnn fa2 wmma gemm flash; do
            [ $(($(elapsed) + 40)) -le "$BUDGET" ] || { echo "skipped: no time left" >"$LOGS/bench_ops_$path.log"; continue; }
            lvl=warn
            [ $path = cudnn ] && lvl=debug
            TSR_CUDA_ATTENTION=$path timeout 60 "$BIN" --log-level $lvl \
                bench ops --device $DEV --filter attention 2>&1 |
                grep -E '^(backend|attention)|cuDNN SDPA' >"$LOGS/bench_ops_$path.log"
        done
        # PyTorch's SDPA at the same shapes, beside the rows above (before
        # the extra UNet rows, so a tight budget drops those first)
        : >"$LOGS/torch.log"
        if "$PY" -c 'import torch' 2>/dev/null && [ $(($(elapsed) + 30)) -le "$BUDGET" ]; then
            timeout 60 "$PY" tests/gpu/torch_bench.py sdpa >"$LOGS/torch.log" 2>&1
        fi
        # the UNet with every attention cuDNN takes on its fused SDPA
        # (opt-in until checked), in the same run as the default rows above
        TSR_CUDA_ATTENTION=cudnn bench "sd15 unet 512 b16 cfg cudnn-att" 60 unet --model "$MODELS/sd15" \
            --size 512 --batch 32 --iters 1
        TSR_CUDA_ATTENTION=cudnn bench "sdxl unet 1024 b16 cfg cudnn-att" 90 unet --model "$MODELS/sdxl" \
            --size 1024 --batch 32 --iters 1
        # and with every f16 attention of head dim 40/64/80/160 on the FA2
        # kernel (backend/cuda/ops_attention_fa2.cu, opt-in until checked)
        TSR_CUDA_ATTENTION=fa2 bench "sd15 unet 512 b16 cfg fa2-att" 60 unet --model "$MODELS/sd15" \
            --size 512 --batch 32 --iters 1
        TSR_CUDA_ATTENTION=fa2 bench "sdxl unet 1024 b1 cfg fa2-att" 60 unet --model "$MODELS/sdxl" \
            --size 1024 --batch 2 --iters 2
        if "$PY" -c 'import torch' 2>/dev/null && [ $(($(elapsed) + 60)) -le "$BUDGET" ]; then
            # the same shapes as the tessera rows above (batch 2 = 1 image
            # with CFG, 32 = 16 images with CFG)
            for spec in "sd15 512 2" "sd15 512 32" "sd15 1024 2" "sdxl 1024 2" "sdxl 1024 32"; do
                set -- $spec
                [ $(($(elapsed) + 60)) -le "$BUDGET" ] || break
                timeout 90 "$PY" tests/gpu/torch_bench.py unet "$MODELS/$1" "$2" "$3" >>"$LOGS/torch.log" 2>&1
            done
        fi
        result timing "$(grep -q FAILED "$LOGS/timing.table" && echo FAIL || echo ok)" "table below; ops in bench_ops.log; PyTorch in torch.log"
    else
        result timing FAIL "the random models could not be made: $(tail -1 "$LOGS/models.log")"
    fi
fi

# ---- serve: tessera serve on the GPU under load ----
# tools/loadtest/bench.sh's "batch" scenario (16 clients, max batch 1
# against 16), every job checked by tessera-loadtest; no job may fail.
# serve_stage NAME TIMEOUT DETAIL [VAR=value...]: one bench.sh run into
# $LOGS/NAME, with the variables given (MODEL, SIZE, STEPS) in its environment
serve_stage() {
    local name=$1 to=$2 detail=$3 st=FAIL
    shift 3
    if env OUT="$LOGS/$name" SCENARIOS=batch DEVICE="$DEV" BUILD="$BUILD" "$@" timeout "$to" \
        tools/loadtest/bench.sh >"$LOGS/$name.log" 2>&1 && ! grep -q 'had errors' "$LOGS/$name.log"; then
        st=ok
    fi
    result "$name" "$st" "table in $name.log ($detail)"
}
skipped serve 90 || serve_stage serve 150 "the demo model, DEVICE=$DEV"
# the same at full size: the random SD1.5 model (text encoder included),
# made for the timing stage
if [ -f "$MODELS/sd15/text_encoder/model.safetensors" ] && ! skipped serve_sd15 120; then
    serve_stage serve_sd15 240 "random SD1.5, 512x512, 20 steps" MODEL="$MODELS/sd15" SIZE=512 STEPS=20
fi

table
[ -s "$LOGS/serve/bench.md" ] && { echo "--- serve ---"; cat "$LOGS/serve/bench.md"; }
[ -s "$LOGS/serve_sd15/bench.md" ] && { echo "--- serve sd15 ---"; cat "$LOGS/serve_sd15/bench.md"; }
if [ -s "$LOGS/timing.table" ]; then
    echo "--- timing (tessera, f16, median) ---"
    cat "$LOGS/timing.table"
    grep -h '^torch: ' "$LOGS/torch.log" 2>/dev/null | sed 's/^torch: /torch /'
    grep -h '^attention' "$LOGS/bench_ops.log" 2>/dev/null | sed 's/^/default /'
    for path in cudnn fa2 wmma gemm flash; do
        grep -h '^attention' "$LOGS/bench_ops_$path.log" 2>/dev/null | sed "s/^/$(printf '%-8s' $path)/"
    done
    grep -h 'cuDNN SDPA' "$LOGS/bench_ops_cudnn.log" 2>/dev/null | sed 's/^.*attention: /cudnn plan: /'
fi
grep -q -E ' FAIL ' "$SUMMARY" && exit 1
exit 0
