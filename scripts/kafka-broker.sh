#!/usr/bin/env bash
# A single-node Apache Kafka 4.x broker (KRaft) in the foreground, for trying rag-monitor's OTLP
# path with a real OpenTelemetry Collector: the Collector's Kafka exporter cannot talk to the
# demo's embedded broker (docs/kafka.md "Brokers"). Runs from the jars scripts/setup-kafka.sh
# assembles (Java 17+ and Maven needed once):
#
#   scripts/setup-kafka.sh && scripts/kafka-broker.sh     # 127.0.0.1:9092; Ctrl-C stops it
#
# KAFKA_PORT (default 9092; the controller takes the next port) and KAFKA_DATA (default
# .cache/kafka/broker, kept between runs) change where. Topics are not created automatically:
# `rag-monitor topics create` makes the ones a configuration needs.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
libs="${repo_root}/.cache/kafka/libs"
port="${KAFKA_PORT:-9092}"
controller_port="$((port + 1))"
data="${KAFKA_DATA:-${repo_root}/.cache/kafka/broker}"
mkdir -p "${data}"
data="$(cd "${data}" && pwd)"

if [[ ! -f "${libs}/.complete" ]]; then
    echo "kafka-broker: no broker jars in ${libs}; run scripts/setup-kafka.sh first" >&2
    exit 1
fi
if ! command -v java >/dev/null 2>&1; then
    echo "kafka-broker: java is not on PATH; install a JDK 17+ (Debian: openjdk-17-jre-headless)" >&2
    exit 1
fi

config="${data}/server.properties"
cat >"${config}" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:${controller_port}
listeners=PLAINTEXT://127.0.0.1:${port},CONTROLLER://127.0.0.1:${controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:${port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=${data}/logs
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
cat >"${data}/log4j2.properties" <<EOF
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${data}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
EOF

java_cmd=(java -Xms128m -Xmx512m -Dlog4j2.configurationFile="${data}/log4j2.properties"
    -cp "${libs}/*")
if [[ ! -f "${data}/logs/meta.properties" ]]; then
    cluster_id="$("${java_cmd[@]}" kafka.tools.StorageTool random-uuid)"
    "${java_cmd[@]}" kafka.tools.StorageTool format -t "${cluster_id}" -c "${config}" >/dev/null
fi
echo "kafka-broker: Apache Kafka on 127.0.0.1:${port} (log: ${data}/server.log); Ctrl-C stops it"
exec "${java_cmd[@]}" kafka.Kafka "${config}"
