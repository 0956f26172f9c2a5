#!/usr/bin/env bash
# Start the machine's PostgreSQL cluster and create the test role and database the store tests
# use (postgresql+asyncpg://ragmon:ragmon@127.0.0.1:5432/ragmon_test). Needs root; skipped
# otherwise (the PostgreSQL tests then skip, or fail under RAGMON_TEST_REQUIRE_SERVICES=1).
set -euo pipefail

if [[ "$(id -u)" != 0 ]] || ! command -v pg_lsclusters >/dev/null; then
    echo "setup-postgres: not root or PostgreSQL not installed; skipping" >&2
    exit 0
fi
if ! pg_lsclusters --no-header | grep -q online; then
    service postgresql start >/dev/null
fi
as_postgres() { runuser -u postgres -- "$@"; }
for _ in $(seq 1 30); do
    as_postgres psql -qtAc "SELECT 1" >/dev/null 2>&1 && break
    sleep 1
done
if [[ "$(as_postgres psql -qtAc "SELECT 1 FROM pg_roles WHERE rolname='ragmon'")" != 1 ]]; then
    as_postgres psql -qc "CREATE ROLE ragmon LOGIN PASSWORD 'ragmon' CREATEDB"
fi
if [[ "$(as_postgres psql -qtAc "SELECT 1 FROM pg_database WHERE datname='ragmon_test'")" != 1 ]]; then
    as_postgres createdb -O ragmon ragmon_test
fi
echo "setup-postgres: ready"
