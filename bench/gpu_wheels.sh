#!/usr/bin/env bash
# Prepare a run of bench/gpu.py on a lent GPU machine (the `device` tool of this project's workplace), which has
# torch+CUDA, pandas, scikit-learn, onnxruntime and transformers 5.x but no network. Run here, in the repo root:
#
#     bash bench/gpu_wheels.sh        # .whl/: our pinned transformers/tokenizers/huggingface_hub; .gpu-data/: ko-help
#
# then on the device (carry [".whl", ".gpu-data"]), in two calls since one call may run 10 minutes at most
# (base-shape fine-tuning is ~10 fits), each writing its JSON under $OUT, the only folder that comes back:
#
#     python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#         .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && python3 bench/gpu.py --ko-help .gpu-data/train.csv \
#         --stages pretraining --output $OUT/gpu-pretraining.json
#     (same install line) ... python3 bench/gpu.py --ko-help .gpu-data/train.csv --stages finetuning,serving \
#         --output $OUT/gpu-finetuning-serving.json
#
# With time left, the CUDA-graph variants: `--stages pretraining --compile graphs` and
# `--stages finetuning --ft-compile graphs` (each against the same plain path and peer).
# Then copy the files into bench/results/ and the numbers into README.md and the docs' GPU sections.
#
# Both folders are listed in .git/info/exclude so they never reach a commit.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for d in .whl .gpu-data; do grep -qx "/$d/" "$exclude" 2>/dev/null || echo "/$d/" >> "$exclude"; done
mkdir -p .whl .gpu-data
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl transformers==4.57.6 tokenizers==0.22.2 huggingface_hub==0.36.2
cp ../shared/data/ko-help/train.csv .gpu-data/train.csv
du -sh .whl .gpu-data
