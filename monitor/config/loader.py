"""Loading the configuration: the only reader of config files and the environment.

Precedence, highest first: environment (`RAGMON_` prefix, `__` between nesting levels), the YAML
file given with `--config`, then the defaults of the sections (which run the daemon on its own).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_settings.exceptions import SettingsError

from monitor.config.names import env_name, field_names_at, unknown_environment, unknown_key_hint
from monitor.config.settings import ENV_NESTED_DELIMITER, ENV_PREFIX, Settings

__all__ = ["ConfigError", "env_name", "load_settings", "masked_dump"]


class ConfigError(Exception):
    """The configuration is invalid; `problems` pairs each bad field's dotted path with why.

    Each problem line ends with where the value came from: the environment variable when one is
    set for the field, else the file given with --config; lines about the file itself (field
    `--config`) or the environment as a whole carry no such hint.
    """

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None) -> None:
        self.problems = problems
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"invalid configuration{where}:"]
        for field, why in problems:
            origin = _origin(field, source)
            lines.append(f"  {field}: {why}" + (f" ({origin})" if origin else ""))
        super().__init__("\n".join(lines))


def _origin(field: str, source: str | None) -> str | None:
    """Where a bad field's value was set, for the error line (None: nothing useful to say)."""
    if not field or not field[0].isalpha() or field.startswith(ENV_PREFIX):
        return None  # "--config", "(environment)", "(root)", a variable named as such
    name = env_name(field)
    if name in os.environ:
        return f"env {name}"
    nested = sorted(k for k in os.environ if k.startswith(name + ENV_NESTED_DELIMITER))
    if nested:
        return f"env {nested[0]}" + (" ..." if len(nested) > 1 else "")
    if not _is_known(field):  # an unknown key of the file: no variable could override it
        return f"set in {source}" if source is not None else None
    section = _is_section(field)
    if source is not None:
        return f"set in {source}" if section else f"set in {source}; env {name} overrides it"
    return f"{name}__... variables" if section else f"env {name}"


def _is_known(dotted_field: str) -> bool:
    location = [int(p) if p.isdecimal() else p for p in dotted_field.split(".")]
    return str(location[-1]) in field_names_at(location)


def _is_section(dotted_field: str) -> bool:
    """Whether a dotted path names a whole section (`kafka`, `judge.redaction`), not a value."""
    model: Any = None
    annotation: Any = Settings
    for part in dotted_field.split("."):
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return False
        model = annotation
        field = model.model_fields.get(part)
        if field is None:
            return False
        annotation = field.annotation
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([("--config", f"cannot read {path}: {exc.strerror}")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([("--config", f"{path} is not UTF-8 (byte {exc.start})")]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(
            [("--config", f"{path} is not valid YAML: {_yaml_problem(exc)}")]
        ) from None
    except RecursionError:
        raise ConfigError([("--config", f"{path} is nested too deeply")]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([("--config", f"{path} must hold a mapping at the top level")])
    bad_keys = [repr(k) for k in data if not isinstance(k, str)]
    if bad_keys:
        raise ConfigError(
            [("--config", f"{path}: top-level keys must be names, not {bad_keys[0]}")]
        )
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error on one line, with positions instead of its `"<unicode string>"` marks."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(str(exc).split())
    text = exc.problem or "malformed"
    if exc.problem_mark is not None:
        text = f"line {exc.problem_mark.line + 1}, column {exc.problem_mark.column + 1}: {text}"
    if exc.context:
        text += f" ({exc.context}"
        if exc.context_mark is not None:
            mark = exc.context_mark
            text += f" that starts at line {mark.line + 1}, column {mark.column + 1}"
        text += ")"
    return text


def load_settings(config_file: Path | None = None) -> Settings:
    """Build the effective settings, raising ConfigError that names every bad field."""
    file_values = _read_yaml(config_file) if config_file is not None else {}
    source = str(config_file) if config_file is not None else None
    unknown = unknown_environment(os.environ)
    try:
        settings = Settings(**file_values)
    except RecursionError:
        raise ConfigError(
            [("(environment or file)", "a value is nested too deeply")], source
        ) from None
    except SettingsError as exc:
        raise ConfigError(
            _undecodable_env_values() or [("(environment)", str(exc))], source
        ) from None
    except ValidationError as exc:
        problems = list(unknown)
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"]) or "(root)"
            if error["type"] == "extra_forbidden":
                problems.append((field, unknown_key_hint(error["loc"])))
            else:
                problems.append((field, error["msg"]))
        raise ConfigError(problems, source) from None
    if unknown:
        raise ConfigError(unknown, source)
    return settings


def _undecodable_env_values() -> list[tuple[str, str]]:
    """Name the RAGMON_ variables holding a list or mapping that is not valid JSON."""
    problems = []
    for key, value in os.environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        path = key[len(ENV_PREFIX) :].lower().split(ENV_NESTED_DELIMITER)
        model: type[BaseModel] = Settings
        annotation: Any = None
        for part in path:
            field = model.model_fields.get(part)
            if field is None:
                break
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                model = annotation
        if get_origin(annotation) in (list, dict):
            try:
                json.loads(value)
            except ValueError:
                problems.append((".".join(path), f'{key} must be JSON, for example ["a", "b"]'))
    return problems


def masked_dump(settings: Settings) -> dict[str, Any]:
    """The effective configuration as plain data, with every secret replaced by asterisks."""
    dumped: dict[str, Any] = settings.model_dump(mode="json")
    return dumped
