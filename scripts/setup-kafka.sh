#!/usr/bin/env bash
# Assemble a runnable Apache Kafka broker classpath from Maven Central into
# .cache/kafka/libs (relative to the repository root). Idempotent: skipped when
# .cache/kafka/libs/.complete records the hash of scripts/kafka-pom.xml.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${script_dir}/.." && pwd)"
pom="${repo_root}/scripts/kafka-pom.xml"
libs_dir="${repo_root}/.cache/kafka/libs"
marker="${libs_dir}/.complete"

for tool in java mvn; do
    if ! command -v "${tool}" >/dev/null 2>&1; then
        echo "setup-kafka: '${tool}' is not on PATH; install a JDK (17+) and Maven to run the Kafka test broker" >&2
        exit 1
    fi
done

pom_hash="$(sha256sum "${pom}" | cut -d' ' -f1)"
if [[ -f "${marker}" ]] && [[ "$(cat "${marker}")" == "${pom_hash}" ]]; then
    echo "setup-kafka: ${libs_dir} is up to date"
    exit 0
fi

echo "setup-kafka: resolving Kafka broker jars into ${libs_dir}"
# Start clean so jars of an older pom do not linger on the classpath.
rm -rf "${libs_dir}"
mkdir -p "${libs_dir}"
# Maven's output goes to a log and is shown only on failure (in -q mode it is just noise).
mvn_log="${repo_root}/.cache/kafka/mvn.log"
if ! mvn -q -B -Dstyle.color=never -f "${pom}" dependency:copy-dependencies \
        -DoutputDirectory="${libs_dir}" -DincludeScope=runtime >"${mvn_log}" 2>&1; then
    cat "${mvn_log}" >&2
    echo "setup-kafka: mvn failed to resolve the Kafka broker jars (output above, ${mvn_log})" >&2
    exit 1
fi

if ! compgen -G "${libs_dir}/kafka_2.13-*.jar" >/dev/null; then
    echo "setup-kafka: kafka_2.13 jar missing from ${libs_dir} after mvn" >&2
    exit 1
fi

printf '%s\n' "${pom_hash}" >"${marker}"
echo "setup-kafka: done ($(find "${libs_dir}" -name '*.jar' | wc -l) jars)"
