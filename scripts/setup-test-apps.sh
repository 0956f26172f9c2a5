#!/usr/bin/env bash
# Python environments for instrumented test apps whose packages cannot share .venv (see
# tests/apps/requirements-*.txt). Each becomes .cache/venvs/<name>, reinstalled only when its
# requirements file changed. Run by scripts/test.sh after the project environment exists.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"

for requirements in tests/apps/requirements-*.txt; do
    name="$(basename "${requirements}" .txt)"
    name="${name#requirements-}"
    venv=".cache/venvs/${name}"
    marker="${venv}/.ragmon-requirements"
    wanted="$(sha256sum "${requirements}" | cut -d' ' -f1)"
    if [[ -x "${venv}/bin/python" ]] && [[ -f "${marker}" ]] && [[ "$(cat "${marker}")" == "${wanted}" ]]; then
        continue
    fi
    echo "setup-test-apps: installing ${requirements} into ${venv}"
    rm -rf "${venv}"
    # The same interpreter as the project environment (venv uses its base Python).
    .venv/bin/python -m venv "${venv}"
    # A current pip: the one bundled with an older Python gives up on this resolution.
    "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check -r "${requirements}"
    echo "${wanted}" >"${marker}"
done
