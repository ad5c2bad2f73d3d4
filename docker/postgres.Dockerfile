# PostgreSQL 15 from Debian's own packages, for compose.fleet.yaml: built offline (a Debian mirror is all it
# reads) on the base docker/README.md makes, where the official postgres image cannot be pulled.
#   docker build -f docker/postgres.Dockerfile --build-arg BASE=local/bookworm-python:3.11 -t electra-postgres:15 .
# Environment, as the official image names it: POSTGRES_PASSWORD (required), POSTGRES_USER, POSTGRES_DB.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
# Debian's package would create and start a cluster of its own at install: the entrypoint makes one in the volume.
RUN mkdir -p /etc/postgresql-common && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf \
    && apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /run/postgresql
COPY docker/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
USER postgres
EXPOSE 5432
VOLUME /var/lib/postgresql/data
# -h 127.0.0.1: ready for TCP clients, not only for the socket the entrypoint's first start uses
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=5 CMD ["pg_isready", "-h", "127.0.0.1", "-q"]
STOPSIGNAL SIGINT
ENTRYPOINT ["postgres-entrypoint"]
