"""The names of the settings, the nearest one to a misspelling, and the `RAGMON_` variables
that name no setting.

pydantic-settings reads only the variables of known sections and ignores every other one, so a
misspelled section (`RAGMON_SAMPLNG__RATE`) or a single underscore where two belong
(`RAGMON_SAMPLING_RATE`) would silently leave the default in place. The rule
(docs/configuration.md "Environment variables"): a `RAGMON_` variable is a setting when its name
holds `__` or its first word is a section name (`RAGMON_KAFKA`, `RAGMON_JUDGE_MODEL`); it must
then name one. Other `RAGMON_` variables (`RAGMON_TEST_...`, `RAGMON_FAULT_...`, the example
Collector configuration's `RAGMON_SPANS_TOPIC`) belong to other tools and are left alone.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from monitor.config.settings import ENV_NESTED_DELIMITER, ENV_PREFIX, Settings


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds directly or as Optional/Union members (not in lists)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in _models_in(arg)]
    return []


def _inner_models(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds at any depth: `list[SuiteConfig]`, `dict[str, Mode]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _inner_models(arg)]


def _is_mapping(annotation: Any) -> bool:
    if get_origin(annotation) is dict:
        return True
    return any(_is_mapping(arg) for arg in get_args(annotation))


def setting_paths(model: type[BaseModel] = Settings, prefix: str = "") -> Iterator[str]:
    """Every dotted setting path, sections and values (`sampling`, `sampling.rate`, ...)."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        for sub in _models_in(field.annotation):
            yield from setting_paths(sub, f"{path}.")


def field_names_at(location: Sequence[str | int]) -> list[str]:
    """The names valid where a validation error's location points (its last part excluded):
    `("judge", "redaction", "patternx")` -> the fields of the redaction section."""
    model: type[BaseModel] = Settings
    key_next = False  # the part after a mapping of models is a key, not a field
    for part in location[:-1]:
        if isinstance(part, int):
            continue
        if key_next:
            key_next = False
            continue
        field = model.model_fields.get(part)
        inner = _inner_models(field.annotation) if field is not None else []
        if field is None or not inner:
            return []
        model = inner[0]
        key_next = _is_mapping(field.annotation)
    return list(model.model_fields)


def nearest(name: str, candidates: Sequence[str]) -> str | None:
    """The candidate a misspelled name most likely meant, None when none is close."""
    matches = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return matches[0] if matches else None


def env_name(dotted_field: str) -> str:
    """The environment variable that sets a field: `kafka.topics` -> `RAGMON_KAFKA__TOPICS`;
    an item of a list is set with the whole list (`golden.suites.0.name` -> `..._SUITES`)."""
    parts = []
    for part in dotted_field.split("."):
        if part.isdecimal():
            break
        parts.append(part)
    return ENV_PREFIX + ENV_NESTED_DELIMITER.join(p.upper() for p in parts)


def unknown_environment(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The `RAGMON_` variables that look like settings but name none, each with a hint.

    Variables under a known section (`RAGMON_KAFKA__NOPE`) are left to the models, which reject
    their unknown keys themselves; this finds the ones pydantic-settings would ignore.
    """
    sections = list(Settings.model_fields)
    paths = list(setting_paths())
    problems = []
    for key in sorted(environ):
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        rest = upper[len(ENV_PREFIX) :].lower()
        first_word = rest.split("_", 1)[0]
        if ENV_NESTED_DELIMITER in rest:
            section = rest.split(ENV_NESTED_DELIMITER, 1)[0]
            if section in sections:
                continue  # the section's model checks its keys
            dotted = rest.replace(ENV_NESTED_DELIMITER, ".")
        elif first_word in sections:
            if rest in sections:
                continue  # a whole section as JSON
            dotted = first_word + "." + rest[len(first_word) + 1 :]
        else:
            continue  # not a setting's name: another tool's variable
        problems.append((key, _unknown_hint(dotted, paths)))
    return problems


def _unknown_hint(dotted: str, paths: list[str]) -> str:
    guess = nearest(dotted, paths)
    if guess is None:
        return "no such setting (sections: " + ", ".join(Settings.model_fields) + ")"
    return f"no such setting; did you mean {guess} ({env_name(guess)})?"


def unknown_key_hint(location: Sequence[str | int]) -> str:
    """The message for a key the models do not know, naming the nearest valid one."""
    name = str(location[-1]) if location else ""
    guess = nearest(name, field_names_at(location))
    if guess is None:
        return "no such setting"
    parent = ".".join(str(p) for p in location[:-1])
    return f"no such setting; did you mean {parent + '.' if parent else ''}{guess}?"
