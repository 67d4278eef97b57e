#!/usr/bin/env bash
# One GPU session's device checks (issues 23 and 27), in the order of their priority, each
# time-boxed so that a slow step cannot take the later ones' results with it:
#
#   1. benchmarks/bench_training.py --device cuda: bert-base, then deep (every variant);
#   2. benchmarks/bench_batched_training.py --device cuda: runs per hour one at a time / batched;
#   3. the depth-48 trained diagram of docs/training.md (post-LN, 3 x 3 cells x 2 seeds), with
#      whatever time is left (its cells are written as they finish; an interrupted grid resumes).
#
# Usage (on the GPU machine, in the repository root; OUT gets the logs, the JSON and a tarball):
#
#     bash benchmarks/cuda_session.sh OUT [SECONDS]
#
# SECONDS (default 540) is the whole script's budget. Needs torch with CUDA, numba, scipy,
# sympy and matplotlib in python3; installs remprop into it without network (editable, no
# dependencies), or, where pip cannot build, runs it from the tree.
set -u
out=${1:?usage: bash benchmarks/cuda_session.sh OUT [SECONDS]}
budget=${2:-540}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
begin=$SECONDS
left() { echo $(( budget - (SECONDS - begin) )); }
stamp() { echo "== $(date -u +%H:%M:%S) [$(( SECONDS - begin )) s] $*"; }

exec > "$out/session.log" 2>&1
stamp "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"

stamp "install"
if ! python3 -m pip install -q --no-deps --no-build-isolation --no-index -e .; then
    echo "pip could not install the tree: running it from the tree instead"
    for part in theory diagrams validation; do ln -sfn "$PWD/$part" "src/remprop/$part"; done
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
remprop() { python3 -m remprop "$@"; }
# the theory's kernels compile on the CPUs while the GPU benchmarks run (the diagram needs them)
remprop precompile diagram --jobs 2 > "$out/precompile.log" 2>&1 &

stamp "bench_training bert-base"
timeout -k 5 120 python3 benchmarks/bench_training.py --device cuda --size bert-base --steps 5 --json \
    > "$out/bench-training-bert-base.json"
stamp "bench_training deep"
timeout -k 5 130 python3 benchmarks/bench_training.py --device cuda --size deep --steps 5 --json \
    > "$out/bench-training-deep.json"
stamp "bench_batched_training"
timeout -k 5 60 python3 benchmarks/bench_batched_training.py --device cuda --runs 6 --steps 20 \
    --sizes 24:64:64:32 --json > "$out/bench-batched-training-cuda.json"

wait
limit=$(( $(left) - 20 ))
stamp "trained diagram, depth 48 ($limit s)"
if [ "$limit" -gt 30 ]; then
    timeout -s INT -k 10 "$limit" python3 -m remprop trained-diagram --norm post --depth 48 --width 256 \
        --seq-len 128 --batch-size 64 --steps 400 --lr 1e-4 --vocab-size 4096 --beta 0.5,1,4 --alpha 0.3,1,2 \
        --seeds 2 --batch-cells 3 --device cuda --workers 0 --max-seconds 1e6 --max-memory 100 \
        --out "$out/trained-post-L48" --json > "$out/trained-post-L48.json"
    echo "trained-diagram exit status $?"
fi
tar czf "$out/trained-post-L48.tgz" -C "$out" trained-post-L48 && rm -rf "$out/trained-post-L48"
stamp "done"
