#!/usr/bin/env bash
# The GPU checklist of DEVELOPERS.md, and the issue-25 runs, in one command of under 10
# minutes on a lent GPU machine (the device tool's limit). It runs in a copy of the
# repository whose ignored folder .gpu/ holds what the machine lacks:
#   .gpu/whl/   wheels of nbclient, nbformat, ipykernel and their dependencies (Python 3.12)
#   .gpu/data/FashionMNIST/raw/   the four Fashion-MNIST IDX files
# Everything it makes goes to $OUT/results.tar.gz (the logs, result files and reports),
# with $OUT/summary.txt. Each job has a deadline, so the archive is always written.
#
# Usage (on the GPU machine): GIT_COMMIT=<sha> bash tools/gpu_session.sh
# In parallel: the notebooks on CUDA (tools/gpu_checklist.py), tests/test_cuda.py, the
# matched CNN of chapter 8 (fashion_mnist_study.py, model resnet8) and the 3-seed
# pre-training of chapter 9 (pretraining_seeds.py, one process a seed); meanwhile, in
# order, the bf16 benchmarks with and without torch.compile.
set -u
START=$SECONDS
LIMIT=${LIMIT:-520}  # seconds, for all jobs together
W=/tmp/gpu-work
mkdir -p "$W" "${OUT:=/tmp/gpu-out}"
left() { local s=$((LIMIT - (SECONDS - START))); echo $((s > 1 ? s : 1)); }  # 0: none

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/whl/*.whl >"$W/pip.log" 2>&1 || echo "pip install failed" >>"$W/pip.log"
export PYTHONPATH=$PWD:/tmp/site VIT_TUTORIAL_DATA=$PWD/.gpu/data PYTHONUNBUFFERED=1
export OMP_NUM_THREADS=1 MPLBACKEND=Agg
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c "import torch, torchvision, timm, sklearn; print('torch', torch.__version__, \
'torchvision', torchvision.__version__, 'timm', timm.__version__, 'sklearn', sklearn.__version__)"
    nproc
} >"$W/machine.txt" 2>&1

cp benchmarks/results/fashion_mnist_study.jsonl "$W/study.jsonl"
timeout -k 10 "$(left)" python3 benchmarks/fashion_mnist_study.py --parts scaling \
    --sizes 1000 55000 4000 15000 --jobs 6 --device cuda --log "$W/study.jsonl" \
    --teachers "$W/teachers" --out "$W/study.json" >"$W/study.log" 2>&1 &
for seed in 0 1 2; do
    timeout -k 10 "$(left)" python3 benchmarks/pretraining_seeds.py --seeds "$seed" --device cuda \
        --threads 1 --log "$W/pretraining_seeds.jsonl" --weights "$W/pretraining_seeds" \
        --out "$W/pretraining_seeds-$seed.json" >"$W/pretraining_seeds-$seed.log" 2>&1 &
done
(
    OMP_NUM_THREADS=2 timeout -k 10 "$(left)" python3 tools/gpu_checklist.py --jobs 3 --timeout 480 \
        --out "$W/gpu_checklist.md" book/09_pretraining.ipynb book/08_data_and_inductive_bias.ipynb \
        book/06_training.ipynb book/appendix_performance.ipynb book/02_patch_embedding.ipynb \
        book/07_axial_attention.ipynb book/04_encoder.ipynb book/05_vision_transformer.ipynb \
        book/01_attention.ipynb book/03_positional_encodings.ipynb book/10_windowed_attention.ipynb \
        book/solutions/*.ipynb
) >"$W/notebooks.log" 2>&1 &
timeout -k 10 "$(left)" python3 -m pytest -o addopts= -p no:cacheprovider -q tests/test_cuda.py \
    >"$W/test_cuda.log" 2>&1 &

# the benchmarks, one at a time beside the jobs above (their ratios are interleaved)
bench() { local name=$1; shift; timeout -k 10 "$(left)" python3 "$@" >"$W/$name.log" 2>&1; }
bench speed_bf16 benchmarks/speed.py --device cuda --amp bf16 --rounds 3 \
    --out "$W/speed_cuda_bf16.json"
bench speed_bf16_compile benchmarks/speed.py --device cuda --amp bf16 --compile --rounds 3 \
    --cases b16_infer_b32 b16_train_b128 fashion_mnist_epoch --out "$W/speed_cuda_bf16_compile.json"
for compile in "" --compile; do
    bench "digits_target_bf16${compile}" benchmarks/digits_target.py --device cuda --amp bf16 \
        $compile --out "$W/digits_target_cuda_bf16${compile}.json"
    bench "fashion_mnist_target_bf16${compile}" benchmarks/fashion_mnist_target.py --seeds 0 \
        --device cuda --amp bf16 $compile --out "$W/fashion_mnist_target_cuda_bf16${compile}.json"
done
wait
echo "finished in $((SECONDS - START)) s" >>"$W/machine.txt"
{
    cat "$W/machine.txt"
    for log in "$W"/*.log; do echo "== $log"; tail -n 25 "$log"; done
} >"$OUT/summary.txt" 2>&1
tar -czf "$OUT/results.tar.gz" -C "$W" --exclude=teachers .
