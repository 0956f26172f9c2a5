"""`rag-monitor check-config`, `schema` and start-up refusal on a bad configuration."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from monitor.cli import main
from monitor.config import ConfigError, Settings, load_settings


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "monitor.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
    )


def test_environment_overrides_the_file_and_nested_names_use_double_underscores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("kafka:\n  group_id: from-file\n  topics: [a]\nhttp:\n  port: 9000\n")
    monkeypatch.setenv("RAGMON_KAFKA__GROUP_ID", "from-env")
    monkeypatch.setenv("RAGMON_KAFKA__TOPICS", '["x", "y"]')
    settings = load_settings(config)
    assert settings.kafka.group_id == "from-env"
    assert settings.kafka.topics == ["x", "y"]
    assert settings.http.port == 9000, "fields the environment does not set come from the file"


@pytest.mark.slow
def test_check_config_masks_secrets(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "kafka:\n  security_protocol: SASL_PLAINTEXT\n"
        "  sasl_mechanism: SCRAM-SHA-256\n  sasl_username: monitor\n"
    )
    result = _cli(
        "check-config",
        "--config",
        str(config),
        env={"RAGMON_KAFKA__SASL_PASSWORD": "s3cret-kafka-pw"},
    )
    assert result.returncode == 0, result.stderr
    assert "s3cret-kafka-pw" not in result.stdout + result.stderr
    assert "sasl_password: '**********'" in result.stdout
    assert "sasl_username: monitor" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("yaml_text", "env", "field"),
    [
        ("kafka:\n  topics: []\n", {}, "kafka.topics"),
        ("http:\n  port: 70000\n", {}, "http.port"),
        ("kafka:\n  format: avro\n", {}, "kafka.format"),
        ("kafka:\n  bootstrap_server: typo:9092\n", {}, "kafka.bootstrap_server"),
        ("", {"RAGMON_LOG__FORMAT": "xml"}, "log.format"),
        ("", {"RAGMON_KAFKA__TOPICS": "not json"}, "kafka.topics"),
        ("kafka:\n  security_protocol: SASL_SSL\n", {}, "kafka"),
        # a logs topic read as spans (or native traces) would dead-letter every message
        ("kafka:\n  otlp_logs_topics: [rag_traces]\n", {}, "otlp_logs_topics"),
        ("kafka:\n  format: native\n  otlp_logs_topics: [otlp_logs]\n", {}, "otlp_logs_topics"),
        # "inf" would disable a bound silently, "nan" compares false with everything
        ("kafka:\n  commit_interval_seconds: .inf\n", {}, "kafka.commit_interval_seconds"),
        ("", {"RAGMON_SAMPLING__RATE": "nan"}, "sampling.rate"),
        ("", {"RAGMON_JUDGE__TIMEOUT_SECONDS": "inf"}, "judge.timeout_seconds"),
        ("", {"RAGMON_CONVERSATIONS__IDLE_SECONDS": "Infinity"}, "conversations.idle_seconds"),
        # an idle partition's fetch is answered only after the wait: /readyz would flap
        ("", {"RAGMON_KAFKA__FETCH_MAX_WAIT_MS": "3000"}, "fetch_max_wait_ms"),
    ],
)
def test_an_invalid_config_names_the_field_and_exits_non_zero(
    tmp_path: Path, yaml_text: str, env: dict[str, str], field: str
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(yaml_text)
    for command in ("check-config", "run"):
        result = _cli(command, "--config", str(config), env=env)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert field in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_config_error_names_the_environment_variable_too() -> None:
    error = ConfigError([("kafka.dlq_topic", "bad")])
    assert "RAGMON_KAFKA__DLQ_TOPIC" in str(error)


@pytest.mark.slow
def test_unreadable_and_malformed_files_are_reported(tmp_path: Path) -> None:
    missing = _cli("check-config", "--config", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("kafka: [unclosed\n")
    result = _cli("check-config", "--config", str(broken))
    assert result.returncode == 2 and "not valid YAML" in result.stderr


def test_schema_command_prints_the_committed_json_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    committed = json.loads((Path(__file__).parents[1] / "schema" / "trace-v1.json").read_text())
    assert printed == committed, "regenerate with: rag-monitor schema > schema/trace-v1.json"
    assert set(printed["required"]) == {"trace_id", "timestamp", "query", "contexts", "answer"}


def _setting_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= _setting_keys(annotation, f"{prefix}{name}.")
        else:
            keys.add(prefix + name)
    return keys


def _readme_setting_keys() -> set[str]:
    """Keys docs/configuration.md's settings table documents. A row may name several keys of one
    section: `kafka.ssl_cafile` / `ssl_certfile`, or `redact.store`, `redact.review`."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    table = page.split("## Settings", 1)[1].split("\n## ", 1)[0]
    keys = set()
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        names = re.findall(r"`([a-z_.]+)`", line.split(" | ", 1)[0])
        prefix = names[0].rsplit(".", 1)[0] + "."
        for name in names:
            keys.add(name if "." in name else prefix + name)
    return keys


def test_the_configuration_page_documents_every_setting() -> None:
    documented = _readme_setting_keys()
    actual = _setting_keys(Settings)
    assert actual - documented == set(), "settings missing from docs/configuration.md"
    assert documented - actual == set(), "docs/configuration.md rows for settings that do not exist"


@pytest.mark.slow
def test_config_errors_say_where_the_value_came_from(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("kafka:\n  topics: []\n  security_protocol: SASL_SSL\n")
    result = _cli("check-config", "--config", str(config))
    assert result.returncode == 2
    assert "kafka.topics: List should have at least 1 item" in result.stderr
    assert f"(set in {config}; env RAGMON_KAFKA__TOPICS overrides it)" in result.stderr
    from_env = _cli("check-config", env={"RAGMON_KAFKA__TOPICS": "[]"})
    assert "(env RAGMON_KAFKA__TOPICS)" in from_env.stderr
    missing = _cli("check-config", "--config", str(tmp_path / "nope.yaml"))
    for result in (missing, _cli("check-config", env={"RAGMON_HTTP__PORT": "x"})):
        assert "RAGMON_--" not in result.stderr and "(env RAGMON_--CONFIG)" not in result.stderr
    assert "--config: cannot read" in missing.stderr and "(env" not in missing.stderr


@pytest.mark.slow
def test_check_config_shows_the_judge_enabled_when_an_endpoint_turns_it_on() -> None:
    result = _cli("check-config", env={"RAGMON_JUDGE__BASE_URL": "http://127.0.0.1:1/v1"})
    assert result.returncode == 0, result.stderr
    judge = yaml.safe_load(result.stdout)["judge"]
    assert judge["enabled"] is True and judge["base_url"] == "http://127.0.0.1:1/v1"
    assert yaml.safe_load(_cli("check-config").stdout)["judge"]["enabled"] is False
