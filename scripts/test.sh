#!/usr/bin/env bash
# The test command (README; .ci/run calls exactly this). Prepares what only the tests need, then
# runs pytest in the project environment with any arguments given:
#   scripts/test.sh                      everything
#   scripts/test.sh -m "not kafka and not slow"   the fast tier (README); pytest options pass through
# Prepared here, each step skipping what is already in place: the development and ragas extras
# in .venv, Debian packages (as root: Java and Maven for the Kafka test broker, PostgreSQL,
# Prometheus, Chromium), the Kafka broker jars, the PostgreSQL test role, the OpenTelemetry
# Collector (built with Go, installed when missing), the instrumented apps' own venvs, and the
# real model servers the judge is tested against (llama.cpp's llama-server and llama_cpp.server
# with the Gemma 3 270M model; built once into .cache/llama/, about 6 minutes on 2 cores).
# Run scripts/setup.sh once first.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
# shellcheck source=scripts/lib/debian.sh
source scripts/lib/debian.sh

if [[ ! -x .venv/bin/python ]]; then
    echo "test: no project environment; run scripts/setup.sh first" >&2
    exit 2
fi

# The test extras, reinstalled only when pyproject.toml changed since the last install.
marker=.venv/.ragmon-test-extras
wanted="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [[ ! -f "${marker}" ]] || [[ "$(cat "${marker}")" != "${wanted}" ]]; then
    echo "test: installing the dev and ragas extras into .venv"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,ragas]'
    echo "${wanted}" >"${marker}"
fi

# Java 17 + Maven assemble and run the test broker; PostgreSQL backs the store tests;
# prometheus (and promtool) the rule and end-to-end tests; chromium the review page test.
ensure_debian_packages openjdk-17-jre-headless maven postgresql prometheus chromium \
    fonts-dejavu-core || echo "test: the tests that need them will skip (or fail in CI)" >&2
scripts/setup-kafka.sh
scripts/setup-postgres.sh
scripts/setup-otelcol.sh
scripts/setup-test-apps.sh
scripts/setup-llama.sh || echo "test: the real model server tests will skip (or fail in CI)" >&2

exec .venv/bin/python -m pytest "$@"
