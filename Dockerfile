# ELECTRA classifier server: JSON API (/v1) and labeling UI (/ui) in one process.
#
# CPU image (default):
#   docker build -t electra-classify .
#   docker run --rm -p 8000:8000 -v "$PWD/onnx:/model:ro" electra-classify
# GPU image (onnxruntime-gpu on a CUDA base; run with the NVIDIA container toolkit):
#   docker build --build-arg VARIANT=gpu -t electra-classify:gpu .
#   docker run --rm --gpus all -p 8000:8000 -v "$PWD/onnx:/model:ro" electra-classify:gpu
# Extra flags go after the image name and replace CMD, e.g. `... electra-classify --port 8000 --api-key K`
# (or pass -e ELECTRA_API_KEY=K). To bake a model in instead of mounting it: `COPY onnx/ /model/` in a
# Dockerfile FROM this image.
#
# Needs BuildKit (Docker 23+ default), which builds only the base stage that VARIANT selects.
#
# tests/app/conftest.py starts the test server with this file's ENTRYPOINT + CMD and runs its HEALTHCHECK
# command, so edit them with the tests in view.

ARG VARIANT=cpu
ARG CUDA_BASE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04

FROM python:3.11-slim AS base-cpu

FROM ${CUDA_BASE} AS base-gpu
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*

FROM base-${VARIANT}
ARG VARIANT
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GRADIO_ANALYTICS_ENABLED=False PATH=/opt/venv/bin:$PATH
# A venv in both variants: Ubuntu's system Python refuses pip installs (PEP 668).
RUN python3 -m venv /opt/venv
# CPU wheels of torch: the default index pulls ~3 GB of CUDA libraries the runtime never uses
# (inference runs on ONNX Runtime; torch serves only un-exported transformers folders).
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY textdata/ textdata/
COPY serving/ serving/
COPY app/ app/
# constraints.txt: the versions CI tests, so the image runs what passed (pip otherwise takes the newest).
RUN pip install -c constraints.txt . \
 && if [ "$VARIANT" = gpu ]; then pip uninstall -y onnxruntime && pip install "onnxruntime-gpu>=1.20"; fi

RUN useradd --create-home --uid 10001 app
USER app
WORKDIR /home/app
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=90s --retries=3 CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
ENTRYPOINT ["python", "-m", "app", "--model", "/model", "--host", "0.0.0.0"]
CMD ["--port", "8000"]
