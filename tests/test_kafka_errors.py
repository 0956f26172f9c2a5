"""Kafka client errors said once, in a person's words (the real broker's side is in
tests/test_topics_create.py and tests/test_security_kafka.py)."""

from __future__ import annotations

import errno
import logging
import socket

import pytest
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

from monitor.sources.kafka_errors import bootstrap_failures, cause_text, error_text


def test_the_class_is_named_once_and_addresses_read_host_port() -> None:
    bootstrap = KafkaConnectionError(
        "Unable to bootstrap from [('127.0.0.1', 41999, <AddressFamily.AF_INET: 2>)]"
    )
    assert (
        error_text(bootstrap) == "KafkaConnectionError: Unable to bootstrap from [127.0.0.1:41999]"
    )
    assert error_text(SaslAuthenticationFailed("Authentication failed")) == (
        "SaslAuthenticationFailed: Authentication failed"  # not "[Error 58] SaslAuth...: ..."
    )
    assert error_text(KafkaConnectionError()) == "KafkaConnectionError"


def test_why_a_connection_failed() -> None:
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 1)")
    assert cause_text(refused) == "connection refused"
    unknown = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert cause_text(unknown) == "cannot resolve the host name (Name or service not known)"
    assert cause_text(TimeoutError()) == "timed out"


def test_a_bootstrap_failure_is_explained_by_the_last_connection_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client_log = logging.getLogger("aiokafka")  # where aiokafka's client logs it
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed")
    gone = KafkaConnectionError("Unable to bootstrap from [...]")
    with bootstrap_failures(quiet=True) as failures:
        assert failures.describe(gone, "a:1,b:2") == "a:1,b:2: no broker answered"
        client_log.error('Unable connect to "%s:%s": %s', "b", 2, refused)
        assert failures.describe(gone, "a:1,b:2") == "b:2: connection refused"
        other = SaslAuthenticationFailed("bad password")
        assert failures.describe(other, "a:1") == "a:1: SaslAuthenticationFailed: bad password"
    assert "Unable connect" not in caplog.text, "quiet: the command's own line says it"
    assert failures not in client_log.filters, "removed when the block ends"
