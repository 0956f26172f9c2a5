#!/usr/bin/env bash
# The headless browser the review-page test drives (tests/test_review_browser.py): Debian's
# `chromium` package (/usr/bin/chromium). Run as root on Debian/Ubuntu; non-interactive; safe to
# run again (installs nothing when chromium is already there).
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-browser: please install the Debian package 'chromium' (used by the review page test)" >&2
    exit 0
fi
echo "setup-browser: installing Debian package: chromium"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null
echo "setup-browser: $(chromium --version 2>/dev/null | head -n1)"
