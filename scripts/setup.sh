#!/usr/bin/env bash
# One-time set-up of a fresh clone: a project virtual environment (.venv) holding rag-monitor
# and the embedded demo broker. Works with the distribution's own Python (Debian 12/13,
# Ubuntu 24.04, whose pip refuses system-wide installs): Debian's python3-venv is installed
# when it is missing (as root), and nothing is installed outside .venv otherwise.
#
# Afterwards `.venv/bin/rag-monitor demo` runs the demo; no activation step is needed.
# What only the tests need (Kafka jars, PostgreSQL, Prometheus, Chromium, ...) is prepared by
# scripts/test.sh. Safe to run again. PYTHON=/path/to/python3 picks another interpreter.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
# shellcheck source=scripts/lib/debian.sh
source scripts/lib/debian.sh

python="${PYTHON:-python3}"
if ! command -v "${python}" >/dev/null 2>&1; then
    echo "setup: ${python} not found; install Python 3.11 or newer (Debian: apt-get install python3)" >&2
    exit 1
fi
if ! "${python}" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "setup: $("${python}" --version 2>&1) is too old; rag-monitor needs Python 3.11 or newer" >&2
    exit 1
fi
if ! "${python}" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    # Debian and Ubuntu ship venv's pip bootstrap separately.
    ensure_debian_packages python3-venv || {
        echo "setup: ${python} cannot create virtual environments (install python3-venv)" >&2
        exit 1
    }
fi
if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv with $("${python}" --version 2>&1)"
    "${python}" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[demo]'
echo "setup: done. Run the demo with: .venv/bin/rag-monitor demo"
