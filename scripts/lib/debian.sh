# Sourced by the set-up scripts: install Debian packages when they are missing.
#
# ensure_debian_packages PKG...  installs the missing ones in one apt transaction when run as
# root on Debian/Ubuntu (non-interactive; package post-install scripts may not start services
# on this machine); otherwise prints what to install and returns 1.

ensure_debian_packages() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("${pkg}")
    done
    ((${#missing[@]})) || return 0
    if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        echo "please install these Debian packages (sudo apt-get install ${missing[*]})" >&2
        return 1
    fi
    echo "installing Debian packages: ${missing[*]}"
    local policy=/usr/sbin/policy-rc.d created_policy=0
    if [[ ! -e "${policy}" ]]; then
        printf '#!/bin/sh\nexit 101\n' >"${policy}"
        chmod +x "${policy}"
        created_policy=1
    fi
    local status=0
    DEBIAN_FRONTEND=noninteractive apt-get update -qq || status=$?
    if ((status == 0)); then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" >/dev/null || status=$?
    fi
    ((created_policy)) && rm -f "${policy}"
    return "${status}"
}
