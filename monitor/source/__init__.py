"""Kafka consumption and decoding: native JSON traces and OTLP spans."""
