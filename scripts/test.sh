#!/usr/bin/env bash
# The test command (README; .ci/run calls exactly this). Prepares what the selected tests need,
# then runs pytest in the project environment with the arguments given:
#   scripts/test.sh                      everything, with every service set up (as CI runs it)
#   scripts/test.sh -m "not kafka and not slow"   the fast tier; any pytest options pass through
# Run scripts/setup.sh once first.
#
# Always: the dev extra in .venv (pytest and what the tests import). Then, for a full run every
# service, and otherwise only those of the tests the arguments select -- pytest collects them
# first and names their service markers (tests/conftest.py derives a test's markers from the
# fixtures it uses):
#   kafka       Java 17 and Maven (Debian, as root), the broker jars (scripts/setup-kafka.sh)
#   postgres    PostgreSQL (Debian, as root), started, with the test role (setup-postgres.sh)
#   prometheus  Prometheus and promtool (Debian, as root)
#   browser     Chromium (Debian, as root)
#   collector   the OpenTelemetry Collector, built with Go (scripts/setup-otelcol.sh)
#   test_apps   the instrumented test apps' own venvs (scripts/setup-test-apps.sh)
#   llama       llama.cpp's servers and the Gemma 3 270M model (scripts/setup-llama.sh; about
#               6 minutes on 2 cores the first time)
#   ragas       the ragas extra in .venv
# Each step skips what is already in place. A service that cannot be set up (not root, no
# network) is reported; its tests then skip, or fail under RAGMON_TEST_REQUIRE_SERVICES=1.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
# shellcheck source=scripts/lib/debian.sh
source scripts/lib/debian.sh

if [[ ! -x .venv/bin/python ]]; then
    echo "test: no project environment; run scripts/setup.sh first" >&2
    exit 2
fi

# install_extras EXTRAS: pip install -e '.[EXTRAS]' unless the marker records these extras (or
# more) installed from this pyproject.toml.
marker=.venv/.ragmon-test-extras
install_extras() {
    local wanted="$1" hash have_hash have_extras extra
    hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
    if [[ -f "${marker}" ]]; then
        read -r have_hash have_extras <"${marker}" || true
        if [[ "${have_hash}" == "${hash}" ]]; then
            local missing=0
            for extra in ${wanted//,/ }; do
                [[ ",${have_extras}," == *",${extra},"* ]] || missing=1
            done
            ((missing)) || return 0
            [[ ",${have_extras}," == *",ragas,"* ]] && wanted="${wanted},ragas"
        fi
    fi
    echo "test: installing the ${wanted} extras into .venv"
    # --no-compile: byte-compiling every module of the extras costs more CPU than the few the
    # tests import, which Python compiles (and caches) on first import.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-compile \
        -e ".[${wanted}]"
    echo "${hash} ${wanted}" >"${marker}"
}

install_extras dev

# The services of the selected tests; "all" for a full run.
services=(all)
if (($#)); then
    list="$(mktemp)"
    status=0
    RAGMON_TEST_SERVICES_FILE="${list}" .venv/bin/python -m pytest --collect-only -q "$@" \
        >/dev/null 2>&1 || status=$?
    if ((status == 0)); then
        mapfile -t services <"${list}"
    elif ((status == 5)); then # no test selected
        services=()
    else
        echo "test: collecting the selected tests failed (pytest reports why below);" \
            "setting up every service" >&2
    fi
    rm -f "${list}"
fi
wants() { [[ " ${services[*]} " == *" all "* || " ${services[*]} " == *" $1 "* ]]; }
not_set_up() {
    echo "test: $1 is not set up: its tests will skip (and fail under" \
        "RAGMON_TEST_REQUIRE_SERVICES=1); -m \"not $1\" leaves them out" >&2
}

if wants ragas; then
    install_extras dev,ragas
fi
if wants kafka; then
    { ensure_debian_packages openjdk-17-jre-headless maven && scripts/setup-kafka.sh; } ||
        not_set_up kafka
fi
if wants postgres; then
    { ensure_debian_packages postgresql && scripts/setup-postgres.sh; } || not_set_up postgres
fi
if wants prometheus; then
    ensure_debian_packages prometheus || not_set_up prometheus
fi
if wants browser; then
    ensure_debian_packages chromium fonts-dejavu-core || not_set_up browser
fi
if wants collector; then
    scripts/setup-otelcol.sh || not_set_up collector
fi
if wants test_apps; then
    scripts/setup-test-apps.sh || not_set_up test_apps
fi
if wants llama; then
    scripts/setup-llama.sh || not_set_up llama
fi

exec .venv/bin/python -m pytest "$@"
