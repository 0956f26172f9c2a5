# syntax=docker/dockerfile:1
# rag-monitor container image.
#
#   docker build -t rag-monitor .                      # tier 0 + the LLM judge (openai client)
#   docker build --build-arg EXTRAS=ragas -t rag-monitor:ragas .
#   docker build --build-arg COMPILE=false -t rag-monitor:pure .   # tier 0 from its sources
#   docker run --read-only -p 9820:9820 rag-monitor    # `rag-monitor run`
#
# Two stages: `build` turns the source into a wheel and installs it with its runtime
# dependencies into a virtual environment; `runtime` copies only that environment onto a clean
# slim base and runs it as an unprivileged user. No compiler, pip cache or source tree ships.
#
# The commands between "ci: install begin" and "ci: install end" are run verbatim by
# tests/test_dockerfile.py (with SRC, WHEELS, VENV pointing at temporary directories), so the
# image installs exactly what CI has installed and started. Keep them plain /bin/sh.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG SRC=/src
ARG WHEELS=/wheels
ARG VENV=/opt/rag-monitor
# Optional extras, comma-separated (e.g. "ragas").
ARG EXTRAS=""
# Tier 0's and the OTLP path's modules compiled to C by mypyc (pyproject.toml's mypyc hook):
# less CPU a trace, the same results. "false" builds a pure-Python wheel and needs no compiler.
ARG COMPILE=true
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR ${SRC}
# The compiler stays in this stage: the runtime stage copies only the built environment.
RUN if [ "${COMPILE}" = true ]; then \
        apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
        && rm -rf /var/lib/apt/lists/*; \
    fi
COPY pyproject.toml README.md ./
COPY monitor ./monitor
# ci: install begin
RUN HATCH_BUILD_HOOK_ENABLE_MYPYC="${COMPILE}" \
    python -m pip wheel --no-deps --wheel-dir "${WHEELS}" "${SRC}"
RUN python -m venv "${VENV}" \
    && wheel="$(ls "${WHEELS}"/rag_monitor-*.whl)" \
    && "${VENV}/bin/python" -m pip install "${wheel}${EXTRAS:+[${EXTRAS}]}"
# ci: install end

FROM ${PYTHON_IMAGE} AS runtime
ARG VENV=/opt/rag-monitor
ARG UID=10001
ARG GID=10001
ARG DATA_DIR=/var/lib/rag-monitor
LABEL org.opencontainers.image.title="rag-monitor" \
      org.opencontainers.image.description="Watches the quality of a production RAG service" \
      org.opencontainers.image.licenses="Apache-2.0"
# Nothing is written outside /tmp and the data directory (the working directory, where the
# default SQLite store lives): bytecode was compiled at install time, caches go to /tmp.
ENV PATH="${VENV}/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    RAGAS_DO_NOT_TRACK=true
RUN groupadd --system --gid "${GID}" ragmon \
    && useradd --system --uid "${UID}" --gid "${GID}" --no-create-home \
        --home-dir "${DATA_DIR}" --shell /usr/sbin/nologin ragmon \
    && install -d -o "${UID}" -g "${GID}" -m 0750 "${DATA_DIR}"
COPY --from=build ${VENV} ${VENV}
WORKDIR ${DATA_DIR}
VOLUME ["/var/lib/rag-monitor", "/tmp"]
USER 10001:10001
EXPOSE 9820
# No curl in slim images: Python's urllib asks /healthz (port from RAGMON_HTTP__PORT).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('RAGMON_HTTP__PORT', '9820'), timeout=4)"]
ENTRYPOINT ["rag-monitor"]
CMD ["run"]
