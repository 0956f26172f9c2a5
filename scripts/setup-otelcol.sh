#!/usr/bin/env bash
# Build the OpenTelemetry Collector the end-to-end tests run (OTLP in, Kafka out) with the
# Collector Builder, from scripts/otelcol-builder.yaml, into .cache/otelcol/otelcol-ragmon.
# Idempotent: skipped when .cache/otelcol/.complete records the hash of the manifest and of
# this script. The first build takes about 4 minutes on 2 cores; later ones seconds (Go's
# module and build caches). Go is installed when missing: Debian's golang-go, and when that is
# older than the builder needs, the Go toolchain published as a module on the Go module proxy
# (golang.org/toolchain, what Go's own toolchain switching downloads).
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${script_dir}/.." && pwd)"
manifest="${script_dir}/otelcol-builder.yaml"
cache_dir="${repo_root}/.cache/otelcol"
binary="${cache_dir}/otelcol-ragmon"
marker="${cache_dir}/.complete"
builder_version="v0.165.0"
# The toolchain fetched when the local Go is too old to switch toolchains by itself (< 1.21).
fallback_toolchain="go1.26.0"

# shellcheck source=scripts/lib/debian.sh
source "${script_dir}/lib/debian.sh"

wanted="$(cat "${manifest}" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
if [[ -x "${binary}" ]] && [[ -f "${marker}" ]] && [[ "$(cat "${marker}")" == "${wanted}" ]]; then
    echo "setup-otelcol: ${binary} is up to date"
    exit 0
fi

# go_minor GO: the minor version of a go binary (19 for go1.19.8), 0 when unknown.
go_minor() {
    "$1" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p' | grep . || echo 0
}

find_go() {
    local candidate
    for candidate in "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
        if [[ -n "${candidate}" ]] && [[ -x "${candidate}" ]]; then
            echo "${candidate}"
            return 0
        fi
    done
    return 1
}

go_bin="$(find_go || true)"
if [[ -z "${go_bin}" ]]; then
    echo "setup-otelcol: Go is not installed; installing Debian's golang-go"
    ensure_debian_packages golang-go || {
        echo "setup-otelcol: cannot install Go; install Go 1.21 or newer and rerun" >&2
        exit 1
    }
    go_bin="$(find_go)"
fi

# Go >= 1.21 downloads the toolchain a module asks for by itself (GOTOOLCHAIN=auto). An older
# one (Debian 12 ships 1.19) fetches that same toolchain module explicitly, once.
if (($(go_minor "${go_bin}") < 21)); then
    toolchain_mod="golang.org/toolchain@v0.0.1-${fallback_toolchain}.linux-$("${go_bin}" env GOARCH)"
    echo "setup-otelcol: $("${go_bin}" env GOVERSION) is too old; fetching ${toolchain_mod}"
    toolchain_dir="$(GOFLAGS=-modcacherw "${go_bin}" mod download -json "${toolchain_mod}" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    # Module zips keep no file modes: mark the toolchain's programs executable, as Go's own
    # toolchain switching does after the same download.
    if [[ -n "${toolchain_dir}" ]] && [[ -f "${toolchain_dir}/bin/go" ]]; then
        chmod a+x "${toolchain_dir}"/bin/* "${toolchain_dir}"/pkg/tool/*/*
    fi
    if [[ -z "${toolchain_dir}" ]] || [[ ! -x "${toolchain_dir}/bin/go" ]]; then
        echo "setup-otelcol: could not fetch ${toolchain_mod}" >&2
        exit 1
    fi
    go_bin="${toolchain_dir}/bin/go"
fi
export GOTOOLCHAIN=auto
export PATH="$(dirname "${go_bin}"):${PATH}"

echo "setup-otelcol: building the Collector with $(go env GOVERSION) (about 4 minutes the first time)"
work="${cache_dir}/work"
rm -rf "${work}"
mkdir -p "${work}/tools"
cp "${manifest}" "${work}/builder.yaml"
log="${cache_dir}/build.log"
if ! (
    cd "${work}"
    GOBIN="${work}/tools" go install "go.opentelemetry.io/collector/cmd/builder@${builder_version}"
    "${work}/tools/builder" --config builder.yaml
) >"${log}" 2>&1; then
    tail -n 40 "${log}" >&2
    echo "setup-otelcol: the Collector build failed (last lines above, all in ${log})" >&2
    exit 1
fi

install -m 0755 "${work}/build/otelcol-ragmon" "${binary}"
rm -rf "${work}"
"${binary}" --version
printf '%s\n' "${wanted}" >"${marker}"
echo "setup-otelcol: done (${binary})"
