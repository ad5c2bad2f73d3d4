# The trainer's image: the full image (docker build --build-arg VARIANT=full -t electra-classify:full .) with the
# first model in /model. Build it in the folder that holds the exported model as onnx/:
#   docker build -f deploy/k8s/trainer.Dockerfile -t registry.example.com/electra-trainer runs/
ARG FROM=electra-classify:full
FROM ${FROM}
COPY --chown=app onnx/ /model/
