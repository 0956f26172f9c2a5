"""Configuration: pydantic-settings models, one module per group of sections, and the loader.

This package imports nothing of the domain -- only pydantic, pydantic-settings, PyYAML and the
standard library -- so every part of the daemon (and its tests and tools) can import the section
it reads without pulling in the store, the metrics or Kafka. A domain module imports its section
from here (``from monitor.config.judge import JudgeConfig``).

- :mod:`~monitor.config.loader`: :func:`load_settings` (YAML file, then the environment on top),
  :class:`ConfigError` naming every bad field and where it was set;
- :mod:`~monitor.config.settings`: :class:`Settings`, the root of every section;
- :mod:`~monitor.config.kafka`, :mod:`~monitor.config.judge`, :mod:`~monitor.config.scoring`
  (scoring, sampling), :mod:`~monitor.config.conversation`, :mod:`~monitor.config.sinks`
  (store, results topic, redaction per sink), :mod:`~monitor.config.process` (http, log,
  telemetry, shutdown, metrics), :mod:`~monitor.config.golden` (golden-set suites).
"""

from monitor.config.kafka import InputFormat, KafkaConfig, aiokafka_security_kwargs
from monitor.config.loader import ConfigError, env_name, load_settings, masked_dump
from monitor.config.settings import ENV_NESTED_DELIMITER, ENV_PREFIX, Settings

__all__ = [
    "ENV_NESTED_DELIMITER",
    "ENV_PREFIX",
    "ConfigError",
    "InputFormat",
    "KafkaConfig",
    "Settings",
    "aiokafka_security_kwargs",
    "env_name",
    "load_settings",
    "masked_dump",
]
