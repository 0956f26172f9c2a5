"""Unknown `RAGMON_` variables and unknown keys fail at start-up naming the nearest setting;
broken YAML is reported on one line naming the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from monitor.config import ConfigError, load_settings
from monitor.config.names import env_name, setting_paths, unknown_environment
from tests.support.cli import rag_monitor


@pytest.fixture(autouse=True)
def _no_ragmon_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper().startswith("RAGMON_"):
            monkeypatch.delenv(key)


def _problems(exc: pytest.ExceptionInfo[ConfigError]) -> dict[str, str]:
    return dict(exc.value.problems)


@pytest.mark.parametrize(
    ("variable", "meant"),
    [
        ("RAGMON_SAMPLNG__RATE", "sampling.rate (RAGMON_SAMPLING__RATE)"),
        ("RAGMON_SAMPLING_RATE", "sampling.rate (RAGMON_SAMPLING__RATE)"),  # one underscore
        ("RAGMON_JUDGE_MODEL", "judge.model (RAGMON_JUDGE__MODEL)"),
        (
            "RAGMON_KAFAK__BOOTSTRAP_SERVERS",
            "kafka.bootstrap_servers (RAGMON_KAFKA__BOOTSTRAP_SERVERS)",
        ),
        ("ragmon_stor__url", "store.url (RAGMON_STORE__URL)"),  # read case-insensitively
    ],
)
def test_a_misspelled_variable_fails_naming_the_nearest_setting(
    monkeypatch: pytest.MonkeyPatch, variable: str, meant: str
) -> None:
    monkeypatch.setenv(variable, "0.1")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert _problems(exc) == {variable: f"no such setting; did you mean {meant}?"}
    assert f"  {variable}: no such setting; did you mean {meant}?" in str(exc.value)


def test_a_misspelled_key_of_a_known_section_names_the_nearest_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGMON_KAFKA__BOOTSTRAP_SERVER", "x:9092")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    message = "no such setting; did you mean kafka.bootstrap_servers?"
    assert _problems(exc) == {"kafka.bootstrap_server": message}
    assert str(exc.value).endswith(f"{message} (env RAGMON_KAFKA__BOOTSTRAP_SERVER)")


def test_a_variable_far_from_every_setting_lists_the_sections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGMON_XYZZY__PLUGH", "1")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert _problems(exc)["RAGMON_XYZZY__PLUGH"].startswith("no such setting (sections: kafka,")


def test_unknown_variables_are_reported_with_the_other_problems(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGMON_SAMPLNG__RATE", "0.1")
    monkeypatch.setenv("RAGMON_HTTP__PORT", "70000")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert set(_problems(exc)) == {"RAGMON_SAMPLNG__RATE", "http.port"}


@pytest.mark.parametrize(
    "variable",
    [
        "RAGMON_TEST_REQUIRE_SERVICES",  # the tests' own
        "RAGMON_FAULT_SEED",
        "RAGMON_FUZZ_MESSAGES",
        "RAGMON_REVIEW_SCREENSHOT",
        "RAGMON_SPANS_TOPIC",  # the example Collector configuration's
        "RAGMON_LOGS_TOPIC",  # "logs" is not the section "log"
        "RAGMON_OTLP_ENCODING",
        "RAGMON_",
    ],
)
def test_variables_of_other_tools_are_left_alone(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "1")
    load_settings()


def test_every_settings_variable_and_a_whole_section_as_json_are_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert unknown_environment({env_name(path): "x" for path in setting_paths()}) == []
    monkeypatch.setenv("RAGMON_KAFKA", '{"group_id": "from-json"}')
    monkeypatch.setenv("RAGMON_SAMPLING__AGENT_RATES", '{"bot": 0.5}')
    monkeypatch.setenv("RAGMON_KAFKA__OTLP_ASSEMBLY_WINDOW_SECONDS", "7")  # the old name
    settings = load_settings()
    assert settings.kafka.group_id == "from-json"
    assert settings.sampling.agent_rates == {"bot": 0.5}
    assert settings.kafka.otlp_assembly_max_seconds == 7


@pytest.mark.parametrize(
    ("text", "field", "hint"),
    [
        ("samplng:\n  rate: 0.1\n", "samplng", "did you mean sampling?"),
        ("judge:\n  redaction:\n    patternz: []\n", "judge.redaction.patternz", "patterns?"),
        (
            "golden:\n  suites:\n    - nme: s\n",
            "golden.suites.0.nme",
            "did you mean golden.suites.0.name?",
        ),
    ],
)
def test_an_unknown_key_in_the_file_names_the_nearest_key_and_the_file(
    tmp_path: Path, text: str, field: str, hint: str
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_settings(config)
    line = next(line for line in str(exc.value).splitlines() if line.startswith(f"  {field}:"))
    assert hint in line and line.endswith(f"(set in {config})"), line


def test_broken_yaml_is_one_line_naming_the_file_and_the_position(tmp_path: Path) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text("kafka:\n  topics: [a, b\nhttp: {}\n")
    with pytest.raises(ConfigError) as exc:
        load_settings(config)
    assert str(exc.value).splitlines()[1:] == [
        f"  --config: {config} is not valid YAML: line 3, column 5: expected ',' or ']', but got"
        " ':' (while parsing a flow sequence that starts at line 2, column 11)"
    ]


def test_the_command_refuses_a_misspelled_variable() -> None:
    result = rag_monitor("check-config", RAGMON_SAMPLNG__RATE="0.1")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "rag-monitor: invalid configuration:",
        "  RAGMON_SAMPLNG__RATE: no such setting; did you mean sampling.rate"
        " (RAGMON_SAMPLING__RATE)?",
    ]


def test_an_agent_rate_outside_zero_to_one_fails_naming_the_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGMON_SAMPLING__AGENT_RATES", '{"bot": 0.5, "billing": 5}')
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert set(_problems(exc)) == {"sampling.agent_rates.billing"}
