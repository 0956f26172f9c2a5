"""`rag-monitor check-config` and `rag-monitor schema`: what the daemon would read."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from monitor.command import ExitCode, Subparsers, set_handler, settings_or_exit


def register(subparsers: Subparsers) -> None:
    check = subparsers.add_parser(
        "check-config", help="print the effective configuration, secrets masked"
    )
    check.add_argument("--config", type=Path, help="YAML configuration file")
    set_handler(check, check_config)

    schema = subparsers.add_parser(
        "schema", help="print the JSON Schema of native traces (version 1)"
    )
    set_handler(schema, print_schema)


def check_config(args: argparse.Namespace) -> ExitCode:
    import yaml

    from monitor.config import masked_dump

    settings = settings_or_exit(args.config)
    print(yaml.safe_dump(masked_dump(settings), sort_keys=False, allow_unicode=True), end="")
    return ExitCode.OK


def print_schema(args: argparse.Namespace) -> ExitCode:
    print(json.dumps(trace_json_schema(), indent=2, ensure_ascii=False))
    return ExitCode.OK


def trace_json_schema() -> dict[str, object]:
    from monitor.models import Trace

    schema = Trace.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://rag-monitor.dev/schema/trace-v1.json"
    return schema
