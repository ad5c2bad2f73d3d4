#!/usr/bin/env bash
# The fleet on this machine, end to end: compose.fleet.yaml up (PostgreSQL, three replicas, nginx; the trainer
# with TRAIN=1), requests through nginx answered by all three replicas, one replica killed (SIGKILL) under
# load with the traffic going on, the replica restarted and back in rotation; with TRAIN=1 a retrain posted
# through nginx whose new version every replica then serves. Exits non-zero at the first check that fails.
#
#   BASE=local/bookworm-python:3.11 BASE_DEBIAN=local/bookworm-python:3.11 TORCH_INDEX= docker/fleet_smoke.sh
#
# MODEL: an exported folder to serve (default: a tiny random model made with docker/fleet_model.py in WORK).
# COMPOSE: the compose command (default: `docker compose` when it works, else `docker-compose`).
# KEEP=1 leaves the fleet up (then: $COMPOSE -p electra-fleet-smoke -f compose.fleet.yaml down -v).
set -euo pipefail
cd "$(dirname "$0")/.."
export DOCKER_BUILDKIT=1 COMPOSE_DOCKER_CLI_BUILD=1
WORK=${WORK:-$(mktemp -d /tmp/fleet-smoke.XXXXXX)}
mkdir -p "$WORK"
PY=${PY:-python3}
if [ -z "${COMPOSE:-}" ]; then
    if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"; else COMPOSE=docker-compose; fi
fi
export POSTGRES_PASSWORD=${POSTGRES_PASSWORD:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}
export ELECTRA_API_KEY=${ELECTRA_API_KEY:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}
export PORT=${PORT:-18080}
if [ -z "${MODEL:-}" ]; then
    PYTHONPATH=$PWD "$PY" docker/fleet_model.py "$WORK/model"
    export MODEL=$WORK/model/onnx ENCODER=$WORK/model/tiny-classifier TRAIN_DATA=$WORK/model/train.csv
fi
fc() { $COMPOSE -p electra-fleet-smoke -f compose.fleet.yaml ${TRAIN:+--profile train} "$@"; }
say() { echo "fleet_smoke: $*"; }
fail() { say "FAILED: $*"; fc ps || true; fc logs --tail 30 || true; exit 1; }
[ -n "${KEEP:-}" ] || trap 'fc down -v --remove-orphans >/dev/null 2>&1 || true' EXIT
URL=http://127.0.0.1:$PORT

cid() { fc ps -q "$1"; }
health() { docker inspect -f '{{.State.Health.Status}}' "$(cid "$1")" 2>/dev/null || echo none; }
wait_healthy() {  # service... : all healthy within WAIT_S (600) s
    local deadline=$((SECONDS + ${WAIT_S:-600})) s
    for s in "$@"; do
        until [ "$(health "$s")" = healthy ]; do
            [ $SECONDS -lt $deadline ] || fail "$s not healthy after ${WAIT_S:-600} s"
            sleep 2
        done
    done
}
# one classify request through nginx: "<status> <replica address> <model version>"
classify() {
    curl -s -o /dev/null -m 30 -H "authorization: Bearer $ELECTRA_API_KEY" -H 'content-type: application/json' \
        -d '{"texts": ["오늘 회의 메모", "에러 발생했다"]}' \
        -w '%{http_code} %header{x-upstream} %header{x-model-version}\n' "$URL/v1/classify" || echo "000 - -"
}
# X-Upstream lists every replica nginx tried ("A, B" when A failed and B answered): keep the one that answered,
# marked "(retried)"
answered() { sed -E 's/^([0-9]+) (([0-9.:]+, )+)([0-9.:]+) /\1 \4(retried) /'; }
burst() { local i; for i in $(seq "$1"); do classify; done | answered; }  # N sequential requests
tally() { awk '{print $1, $2, $3}' | sort | uniq -c | sed 's/^/    /'; }

t0=$SECONDS
fc up -d --build || fail "compose up"
wait_healthy postgres replica1 replica2 replica3 nginx ${TRAIN:+trainer}
say "up and healthy in $((SECONDS - t0)) s (build included)"
docker exec "$(cid nginx)" nginx -t 2>&1 | tail -1
# the schema: made by the one-shot migrate service (replicas never migrate), which exited 0 before replica1 started
[ "$(docker inspect -f '{{.State.ExitCode}}' "$(cid migrate)")" = 0 ] || fail "the migrate service did not exit 0"
say "migrate: $(fc logs --no-color migrate 2>&1 | tail -1)"

burst 30 > "$WORK/round1.txt"
say "30 requests through nginx (status, replica, version):"; tally < "$WORK/round1.txt"
[ "$(grep -c '^200 ' "$WORK/round1.txt")" = 30 ] || fail "not every request answered 200"
[ "$(awk '{sub(/[(]retried[)]/, "", $2); print $2}' "$WORK/round1.txt" | sort -u | wc -l)" = 3 ] || fail "not all three replicas answered"

# the label store is the shared PostgreSQL: its tables exist (alembic ran) and every replica connected
tables=$(docker exec "$(cid postgres)" psql -U electra -d electra -Atc "select count(*) from information_schema.tables where table_schema = 'public'")
clients=$(docker exec "$(cid postgres)" psql -U electra -d electra -Atc "select count(distinct client_addr) from pg_stat_activity where datname = 'electra' and client_addr is not null")
say "PostgreSQL: $tables tables in database electra; connections from $clients addresses now"
[ "$tables" -gt 0 ] || fail "no tables in PostgreSQL"

# SIGKILL one replica while 4 clients send requests; then it restarts (as a crashed container would)
# each client sends until 8 s after `docker kill` returned (two 2026-11-26 runs with a fixed count or a fixed
# 12 s ended before a kill the loaded docker client took seconds to deliver); each request's start time is kept
rm -f "$WORK/killed"
after_kill() { [ -e "$WORK/killed" ] && [ $(($(date +%s) - $(cat "$WORK/killed"))) -ge 8 ]; }
for c in 1 2 3 4; do (until after_kill; do classify | sed "s/\$/ $(date +%s)/"; done | answered) > "$WORK/kill.$c.txt" & done
sleep 4
docker kill "$(cid replica2)" >/dev/null
date +%s > "$WORK/killed.tmp" && mv "$WORK/killed.tmp" "$WORK/killed"
say "killed replica2 (SIGKILL) under load"
wait
cat "$WORK"/kill.*.txt > "$WORK/round2.txt"
after=$(awk -v k="$(cat "$WORK/killed")" '$4 > k' "$WORK/round2.txt" | wc -l)
say "$(wc -l < "$WORK/round2.txt") requests across the kill, $after of them started after it:"; tally < "$WORK/round2.txt"
[ "$after" -gt 0 ] || fail "no request started after the kill"
bad=$(grep -vc '^200 ' "$WORK/round2.txt" || true)
[ "$bad" = 0 ] || fail "$bad requests failed across the kill"

burst 20 > "$WORK/round3.txt"
say "20 requests with replica2 down:"; tally < "$WORK/round3.txt"
[ "$(grep -c '^200 ' "$WORK/round3.txt")" = 20 ] || fail "requests failed with replica2 down"
grep -q '\.12:8000' "$WORK/round3.txt" && fail "the dead replica2 answered"

docker start "$(cid replica2)" >/dev/null
t1=$SECONDS
wait_healthy replica2
say "replica2 restarted and ready in $((SECONDS - t1)) s"
sleep 6  # nginx rests a failed server for fail_timeout (5 s) before it sends it requests again
burst 30 > "$WORK/round4.txt"
say "30 requests after the restart:"; tally < "$WORK/round4.txt"
[ "$(grep -c '^200 ' "$WORK/round4.txt")" = 30 ] || fail "requests failed after the restart"
grep -q '\.12:8000' "$WORK/round4.txt" || fail "replica2 is not back in rotation"

if [ -n "${TRAIN:-}" ]; then
    auth="authorization: Bearer $ELECTRA_API_KEY"
    job=$(curl -sf -m 30 -H "$auth" -H 'content-type: application/json' -d '{"folds": 2, "epochs": 1}' "$URL/v1/train" \
        | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["id"])') || fail "POST /v1/train through nginx"
    say "training job $job started on the trainer through nginx"
    t2=$SECONDS
    while :; do
        state=$(curl -sf -m 10 -H "$auth" "$URL/v1/jobs/$job" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["status"])')
        case $state in succeeded) break ;; failed|cancelled) fail "job $job $state" ;; esac
        [ $((SECONDS - t2)) -lt 600 ] || fail "job $job still $state after 600 s"
        sleep 3
    done
    say "job $job succeeded in $((SECONDS - t2)) s"
    sleep 3  # the replicas notice the new active version within a second and switch once it is loaded
    burst 30 > "$WORK/round5.txt"
    say "30 requests after the retrain:"; tally < "$WORK/round5.txt"
    [ "$(awk '$1 == 200 {print $3}' "$WORK/round5.txt" | sort -u)" = "$(awk '{print $3}' "$WORK/round5.txt" | tail -1)" ] \
        || fail "replicas answer from different versions"
    grep -q ' v1$' "$WORK/round5.txt" && fail "a replica still answers from v1"
fi
say "passed in $((SECONDS - t0)) s; logs and tallies in $WORK"
