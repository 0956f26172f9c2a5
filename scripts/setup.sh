#!/usr/bin/env bash
# One-time set-up of a development or CI machine, from a clean clone:
#   - Debian packages the tests need (when run as root on Debian/Ubuntu; otherwise listed),
#   - the Python package with its development extras,
#   - the Apache Kafka broker jars for the test broker (scripts/setup-kafka.sh).
# Safe to run again: every step skips what is already there.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"

# Java 17 + Maven assemble and run the test broker; PostgreSQL backs the store tests;
# prometheus (and promtool) the rule and end-to-end tests; chromium the review page test.
# One apt transaction here; the setup-* scripts below then find everything in place.
debian_packages=(openjdk-17-jre-headless maven postgresql prometheus chromium fonts-dejavu-core)
missing=()
for pkg in "${debian_packages[@]}"; do
    dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("${pkg}")
done
if ((${#missing[@]})); then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
        echo "setup: installing Debian packages: ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    else
        echo "setup: please install these packages (needed by the tests): ${missing[*]}" >&2
    fi
fi

python3 -m pip install --quiet --disable-pip-version-check -e '.[dev,ragas]'
scripts/setup-kafka.sh
scripts/setup-postgres.sh
scripts/setup-ops.sh        # prometheus + promtool for the rule and end-to-end tests
scripts/setup-browser.sh    # headless Chromium for the /review page test
echo "setup: done"
