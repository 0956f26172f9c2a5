"""Which heavy modules `rag-monitor` loads before it has decided what to do.

`import monitor.cli`, building the parser and parsing arguments (every help page, usage errors,
`--version`) must stay on the standard library, so that the command answers at once (issue 24:
under 300 ms); a subcommand's handler imports what it needs when it runs. The list holds the
packages `python -X importtime` showed costing 25 ms or more each on the development machine
(scipy, openai and sqlalchemy the most); bench/cli_start.py prints the same probe beside the
start-up times.
"""

from __future__ import annotations

import json
import subprocess

HEAVY_MODULES = (
    "aiohttp",
    "aiokafka",
    "aiosqlite",
    "apscheduler",
    "asyncio",
    "asyncpg",
    "httpx",
    "jinja2",
    "numpy",
    "openai",
    "opentelemetry",
    "prometheus_client",
    "pydantic",
    "pydantic_settings",
    "scipy",
    "sqlalchemy",
    "structlog",
    "tenacity",
    "yaml",
)

_PROBE = """
import argparse, contextlib, io, json, sys
from monitor.cli import build_parser

def command_paths(parser, path=()):
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from command_paths(sub, (*path, name))

argvs = [[*path, "--help"] for path in command_paths(build_parser())]
argvs += [[], ["--version"], ["nope"], ["run", "--port", "9000"], ["review", "--worst", "0"]]
for argv in argvs:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            build_parser().parse_args(argv)
        except SystemExit:
            pass
heavy = json.loads(sys.argv[1])
loaded = sorted(name for name in heavy if name in sys.modules)
print(json.dumps({"loaded": loaded, "parsed": len(argvs)}))
"""


def probe(python: str, first: str = "") -> dict[str, object]:
    """Run the probe in a fresh interpreter, after the code `first`:
    {"loaded": [heavy modules], "parsed": N argvs}."""
    result = subprocess.run(
        [python, "-c", first + "\n" + _PROBE, json.dumps(HEAVY_MODULES)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answer: dict[str, object] = json.loads(result.stdout)
    return answer


def heavy_modules_after_parsing(python: str) -> list[str]:
    loaded = probe(python)["loaded"]
    assert isinstance(loaded, list)
    return [str(name) for name in loaded]
