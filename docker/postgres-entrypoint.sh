#!/bin/sh
# First start on an empty volume: a cluster whose only user is POSTGRES_USER (password, scram-sha-256 over TCP)
# and a database POSTGRES_DB; later starts reuse it. Then PostgreSQL in the foreground (SIGINT: fast shutdown).
set -eu
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (the database refuses to start without one)}"
user=${POSTGRES_USER:-electra}
db=${POSTGRES_DB:-electra}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pw=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pw"
    initdb -D "$PGDATA" -U "$user" --pwfile="$pw" --auth-host=scram-sha-256 --auth-local=trust \
        --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pw"
    # containers on the compose network (or pods) connect over TCP with the password
    printf 'host all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n' >> "$PGDATA/pg_hba.conf"
    if [ "$db" != postgres ]; then
        echo "CREATE DATABASE \"$db\" OWNER \"$user\"" | postgres --single -D "$PGDATA" -j postgres >/dev/null
    fi
    echo "postgres-entrypoint: created the cluster in $PGDATA (user $user, database $db)"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
