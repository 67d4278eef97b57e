#!/usr/bin/env bash
# One GPU session's device checks (issues 23 and 27), in the order of their priority, each
# time-boxed so that a slow step cannot take the later ones' results with it. STAGES (default
# "stack figs": what is still unmeasured) picks them, in this order:
#
#   bench    benchmarks/bench_training.py --device cuda: bert-base, then deep (before, +sdpa,
#            +adamw, +compile);
#   stack    +compile beside +compile-stack (the whole stack one compiled graph) in one process at
#            bert-base, then +compile-stack at deep;
#   batched  benchmarks/bench_batched_training.py --device cuda: runs per hour one at a time / batched;
#   figs     remprop figures --only 6,8 at the paper's sizes on CUDA, with whatever time is left
#            before the diagram (estimated at 8e16 floating-point operations: more than one
#            session; its finished training runs are kept in OUT/figs.tgz, and a figs.tgz carried
#            to the machine as .gpu/figs.tgz is unpacked first, so the next session resumes: put
#            it in .gpu/, ignored through .git/info/exclude, and name .gpu in the run's carry);
#   diagram  the depth-48 trained diagram of docs/training.md (post-LN, 3 x 3 cells x 2 seeds), with
#            whatever time is left (its cells are written as they finish; an interrupted grid resumes).
#
# Usage (on the GPU machine, in the repository root; OUT gets the logs, the JSON and a tarball):
#
#     bash benchmarks/cuda_session.sh OUT [SECONDS] [STAGES]
#
# SECONDS (default 540) is the whole script's budget. The first session (2026-11-28, one H200)
# ran bench, batched and diagram (then the pre-LN diagram by hand): docs/data/cuda-session-h200.log.
# Needs torch with CUDA, numba, scipy, sympy and matplotlib in python3; installs remprop into it
# without network (editable, no dependencies), or, where pip cannot build, runs it from the tree.
set -u
out=${1:?usage: bash benchmarks/cuda_session.sh OUT [SECONDS]}
budget=${2:-540}
stages=" ${3:-stack figs} "
want() { [[ "$stages" == *" $1 "* ]]; }
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

if want bench; then
    for size in bert-base deep; do
        stamp "bench_training $size"
        timeout -k 5 130 python3 benchmarks/bench_training.py --device cuda --size $size --steps 5 --json \
            --variants before,+sdpa,+adamw,+compile > "$out/bench-training-$size.json"
    done
fi
if want stack; then
    stamp "bench_training bert-base +compile, +compile-stack"
    timeout -k 5 300 python3 benchmarks/bench_training.py --device cuda --size bert-base --steps 5 --json \
        --variants +compile,+compile-stack > "$out/bench-training-bert-base-stack.json"
    stamp "bench_training deep +compile-stack"
    timeout -k 5 240 python3 benchmarks/bench_training.py --device cuda --size deep --steps 5 --json \
        --variants +compile-stack > "$out/bench-training-deep-stack.json"
fi
if want batched; then
    stamp "bench_batched_training"
    timeout -k 5 60 python3 benchmarks/bench_batched_training.py --device cuda --runs 6 --steps 20 \
        --sizes 24:64:64:32 --json > "$out/bench-batched-training-cuda.json"
fi

wait
if want figs; then
    limit=$(( $(left) - 30 ))
    stamp "figures 6 and 8 at the paper's sizes ($limit s)"
    [ -f .gpu/figs.tgz ] && tar xzf .gpu/figs.tgz -C "$out"
    if [ "$limit" -gt 60 ]; then
        timeout -s INT -k 10 "$limit" python3 -m remprop figures --only 6,8 --device cuda --out "$out/figs" \
            --max-seconds 1e6 --max-memory 100 --json > "$out/figures-6-8.json"
        echo "figures exit status $?"
    fi
    [ -d "$out/figs" ] && tar czf "$out/figs.tgz" -C "$out" figs && rm -rf "$out/figs"
fi
limit=$(( $(left) - 20 ))
stamp "trained diagram, depth 48 ($limit s)"
if want diagram && [ "$limit" -gt 30 ]; then
    timeout -s INT -k 10 "$limit" python3 -m remprop trained-diagram --norm post --depth 48 --width 256 \
        --seq-len 128 --batch-size 64 --steps 400 --lr 1e-4 --vocab-size 4096 --beta 0.5,1,4 --alpha 0.3,1,2 \
        --seeds 2 --batch-cells 3 --device cuda --workers 0 --max-seconds 1e6 --max-memory 100 \
        --out "$out/trained-post-L48" --json > "$out/trained-post-L48.json"
    echo "trained-diagram exit status $?"
fi
[ -d "$out/trained-post-L48" ] && tar czf "$out/trained-post-L48.tgz" -C "$out" trained-post-L48 \
    && rm -rf "$out/trained-post-L48"
stamp "done"
