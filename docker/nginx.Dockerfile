# Debian's nginx as the fleet's load balancer (compose.fleet.yaml), built offline on the base docker/README.md
# makes (a Debian mirror is all it reads). The configuration is docker/nginx-fleet.conf.
#   docker build -f docker/nginx.Dockerfile --build-arg BASE=local/bookworm-python:3.11 -t electra-nginx .
ARG BASE=debian:bookworm-slim
FROM ${BASE}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx-light \
    && rm -rf /var/lib/apt/lists/* /etc/nginx/sites-enabled/*
COPY docker/nginx-fleet.conf /etc/nginx/nginx.conf
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --retries=3 CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080"]
STOPSIGNAL SIGQUIT
CMD ["nginx", "-g", "daemon off;"]
