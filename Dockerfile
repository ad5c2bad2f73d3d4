# ELECTRA classifier server: JSON API (/v1) and labeling UI (/ui) in one process.
#
# Three variants (VARIANT build argument; sizes measured in docs/results.md, "Docker images"):
#   cpu  (default) serves an exported ONNX folder (python -m serving.export) on ONNX Runtime, no torch
#   full           adds CPU torch and the training stack: un-exported transformers folders, export, training
#                  (the server's retraining child runs in the same container: compose.train.yaml)
#   gpu            adds PyPI's CUDA torch: the PyTorch GPU path (bf16 + CUDA graphs) serves; run with
#                  `--gpus all` (NVIDIA container toolkit). onnxruntime-gpu stays optional (docs/app.md).
#
#   docker build -t electra-classify .
#   docker run --rm -p 8000:8000 -v "$PWD/onnx:/model:ro" -v electra-data:/data electra-classify
#   docker build --build-arg VARIANT=full -t electra-classify:full .
#   docker build --build-arg VARIANT=gpu -t electra-classify:gpu .
#
# Where things come from, for a machine without a registry or torch's index (defaults need neither):
#   --build-arg BASE=IMAGE        any Debian/Ubuntu-like image with python3 (>= 3.11) and python3-venv
#   --build-arg TORCH_INDEX=      empty: install torch==TORCH_VERSION from the wheel(s) put in docker/wheels/
# docker/README.md builds a stand-in BASE with debootstrap and runs tests/docker against it.
#
# Extra flags go after the image name and replace CMD, e.g. `... electra-classify --port 8000 --api-key K`
# (or pass -e ELECTRA_API_KEY=K). To bake a model in: `COPY onnx/ /model/` in a Dockerfile FROM this image.
# Needs BuildKit (Docker 23+ default; DOCKER_BUILDKIT=1 before): it builds only the stages VARIANT uses.
#
# tests/app/conftest.py starts the test server with this file's ENTRYPOINT + CMD and runs its HEALTHCHECK
# command, and tests/docker builds and runs the image, so edit them with the tests in view.

ARG VARIANT=cpu
ARG BASE=python:3.11-slim

FROM ${BASE} AS python
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GRADIO_ANALYTICS_ENABLED=False PATH=/opt/venv/bin:$PATH
# A venv on every base: Debian's and Ubuntu's system Python refuse pip installs (PEP 668).
RUN python3 -m venv /opt/venv
WORKDIR /src

# torch first, per variant: the largest layer, rebuilt only when TORCH_* change (not with pyproject.toml or
# constraints.txt, which the next layers apply to torch's dependencies the project shares).
FROM python AS torch-cpu
# transformers' notice that it found no torch: expected here, and it would open every log.
ENV TRANSFORMERS_NO_ADVISORY_WARNINGS=1

FROM python AS torch-full
ARG TORCH_VERSION=2.13.0
# CPU wheels: the default index pulls ~3 GB of CUDA libraries a CPU never uses.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN --mount=type=bind,source=docker/wheels,target=/wheels \
    if [ -n "$TORCH_INDEX" ]; then pip install "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX"; \
    else pip install --find-links /wheels "torch==$TORCH_VERSION"; fi

FROM python AS torch-gpu
ARG TORCH_VERSION=2.13.0
# PyPI's Linux torch is the CUDA build; its CUDA and cuDNN libraries come as nvidia-* wheels, so the
# base needs no CUDA toolkit, only the host's driver (--gpus all).
RUN pip install "torch==$TORCH_VERSION"
# What the NVIDIA container toolkit mounts from the host driver (nvidia/cuda images set the same).
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility

FROM torch-${VARIANT}
ARG VARIANT
COPY pyproject.toml constraints.txt ./
COPY docker/deps.py docker/
# constraints.txt: the versions CI tests, so the image runs what passed (pip otherwise takes the newest).
# The slim image gets the serving dependencies alone; the others also what training and export import.
RUN python docker/deps.py serve > serve.txt && pip install -c constraints.txt -r serve.txt
RUN if [ "$VARIANT" != cpu ]; then python docker/deps.py rest > rest.txt && pip install -c constraints.txt -r rest.txt; fi
# The project itself, last: a code change rebuilds only this layer. The bind mount keeps the source and
# the build's scratch files out of the image; .dockerignore keeps tests, docs and runs out of the context.
RUN --mount=type=bind,source=.,target=/src,rw pip install --no-deps /src
# /data/models exists (the app's) so a volume mounted there alone (compose.fleet.yaml's shared model store)
# starts owned by the app user, not root.
RUN useradd --create-home --uid 10001 app && mkdir -p /data/models && chown -R app /data && rm -rf /src
USER app
# App data (the UI's labeling sessions in /data/app-data, the model registry in /data/app-data/models
# unless --models-dir, retraining jobs inside it): mount a volume here to keep them.
WORKDIR /data
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=90s --retries=3 CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
ENTRYPOINT ["python", "-m", "app", "--model", "/model", "--host", "0.0.0.0"]
CMD ["--port", "8000"]
