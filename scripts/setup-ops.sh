#!/usr/bin/env bash
# Tools the operations tests need (tests/test_rules.py): promtool and the Prometheus server, from
# Debian's `prometheus` package. Run as root on Debian/Ubuntu; non-interactive; safe to run again
# (installs nothing when /usr/bin/promtool is already there).
set -euo pipefail

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-ops: please install the Debian package 'prometheus' (promtool, used by the rule tests)" >&2
    exit 0
fi
echo "setup-ops: installing Debian package: prometheus"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends keeps out the node exporter and other recommended services;
# policy-rc.d stops the package's post-install script from starting a server on this machine.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e "${policy}" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"${policy}"
    chmod +x "${policy}"
    created_policy=1
fi
trap '[[ ${created_policy} == 1 ]] && rm -f "${policy}"' EXIT
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v promtool >/dev/null
echo "setup-ops: $(promtool --version 2>&1 | head -n1)"
