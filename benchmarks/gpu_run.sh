#!/usr/bin/env bash
# Every real-GPU check in one go, for a machine with an NVIDIA GPU and no network
# (python3 with torch, psutil, nvidia-ml-py, matplotlib, pytest and jsonschema):
#
#   benchmarks/gpu_run.sh OUTDIR
#
# Where a package is missing there (jsonschema, which the suite's JSON check needs after every
# test that writes files), bring its wheels in .whl/ at the repository's root: they are
# installed into /tmp/gpu-run-site first. On a machine where pip works:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#       -d .whl jsonschema jsonschema-specifications referencing rpds-py
#
# 1. the machine: GPUs, Python, torch, cores;
# 2. the real-GPU tests (-m gpu): tests/test_gpu.py and tests/test_real_gpu.py;
# 3. benchmarks/gpu_check.py: feedprof's NVML sampler next to nvidia-smi;
# 4. benchmarks/gpu_tune.py: a tune of the JPEG/ResNet-18 workload, pin_memory included;
# 5. benchmarks/gpu_online.py: that job as written and under tune --online, timed from outside;
# 6. benchmarks/gpu_beyond.py: that job's pick explained part by part, and the remedy feedprof
#    ranks first applied and timed beside it.
# Each step has its own time limit and a failing one does not stop the next; OUTDIR gets
# each step's log and the result files (also written to benchmarks/results/).
# STEPS="tests gpu_beyond" runs only the steps named (a short lease); GPU_TESTS_K="profile" picks tests.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: benchmarks/gpu_run.sh OUTDIR}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-run-site \
        .whl/*.whl && export PYTHONPATH=/tmp/gpu-run-site:$PYTHONPATH
fi
if ! $PY -c "import jsonschema" 2>/dev/null; then
    echo "jsonschema cannot be imported by $PY: every test that writes files would error at teardown" \
         "(bring its wheels for this Python in .whl/: see the top of this file)" >&2
    exit 2
fi
{
    nvidia-smi -L
    $PY -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__,
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA')"
    echo "cores $(nproc)"
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
step() {  # step NAME SECONDS COMMAND...: one check, its log in OUTDIR/NAME.log
    local name=$1 limit=$2
    shift 2
    if [[ -n ${STEPS:-} && " $STEPS " != *" $name "* ]]; then return; fi
    local t0=$SECONDS
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    echo "== $name: exit $? in $((SECONDS - t0)) s"
    tail -n 15 "$out/$name.log"
}
step tests 280 $PY -m pytest -o addopts="" -p no:cacheprovider -q -ra -m gpu tests/test_gpu.py tests/test_real_gpu.py \
    -k "${GPU_TESTS_K:-}"
step gpu_check 60 $PY benchmarks/gpu_check.py
step gpu_tune 200 $PY benchmarks/gpu_tune.py --budget 150 -- --epochs 300
step gpu_online 200 $PY benchmarks/gpu_online.py
step gpu_beyond 330 $PY benchmarks/gpu_beyond.py --budget 120 --reps 2
for kind in sampler tune online beyond; do
    cp benchmarks/results/gpu-$kind-*.json "$out/" 2>/dev/null
done
ls "$out"
