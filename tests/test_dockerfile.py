"""The container image: static checks of the Dockerfile, and its install steps run for real.

No Docker engine runs here, so the commands between "ci: install begin" and "ci: install end"
in the Dockerfile's build stage are executed verbatim (with /bin/sh, as `RUN` does) against
temporary directories: build the wheel, install it into a fresh virtual environment, then run
the installed `rag-monitor` the way the image does, including its HEALTHCHECK command against
the running daemon.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from monitor.compiled import MODULES

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
CHART_VALUES = ROOT / "helm" / "rag-monitor" / "values.yaml"


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"stage {self.name} has no {keyword}"
        return found[-1]


def parse(text: str) -> tuple[dict[str, str], list[Stage], list[Instruction]]:
    """Global ARG defaults, the stages, and the RUN instructions between the ci markers."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    ci_runs: list[Instruction] = []
    in_ci = False
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        raw = lines[i].strip()
        i += 1
        if raw.startswith("#"):
            if raw == "# ci: install begin":
                in_ci = True
            elif raw == "# ci: install end":
                in_ci = False
            continue
        if not raw:
            continue
        while raw.endswith("\\"):
            raw = raw[:-1].rstrip() + " " + lines[i].strip()
            i += 1
        keyword, _, args = raw.partition(" ")
        instruction = Instruction(keyword.upper(), args.strip(), start + 1)
        if instruction.keyword == "FROM":
            parts = instruction.args.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(base=parts[0], name=name))
        elif not stages and instruction.keyword == "ARG":
            key, _, default = instruction.args.partition("=")
            global_args[key] = default.strip('"')
        else:
            stages[-1].instructions.append(instruction)
            if in_ci and instruction.keyword == "RUN":
                ci_runs.append(instruction)
    return global_args, stages, ci_runs


def stage_args(stage: Stage) -> dict[str, str]:
    args = {}
    for instruction in stage.all("ARG"):
        key, _, default = instruction.args.partition("=")
        args[key] = default.strip('"')
    return args


GLOBAL_ARGS, STAGES, CI_RUNS = parse(DOCKERFILE.read_text())
BUILD = next(s for s in STAGES if s.name == "build")
RUNTIME = STAGES[-1]


def resolve(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), text)


# --- static checks --------------------------------------------------------------------------------


def test_multi_stage_from_a_pinned_slim_python_311_base() -> None:
    assert len(STAGES) >= 2
    image = GLOBAL_ARGS["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-(bookworm|trixie)", image), image
    for stage in STAGES:
        assert resolve(stage.base, GLOBAL_ARGS) == image
    assert RUNTIME.name == "runtime"
    copies = [c.args for c in RUNTIME.all("COPY")]
    assert copies == ["--from=build ${VENV} ${VENV}"], "runtime takes only the built venv"
    assert not RUNTIME.all("RUN") or all("pip" not in r.args for r in RUNTIME.all("RUN"))


def test_runs_as_the_charts_non_root_user() -> None:
    user = resolve(RUNTIME.last("USER").args, stage_args(RUNTIME))
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    values = yaml.safe_load(CHART_VALUES.read_text())
    assert int(uid) == values["podSecurityContext"]["runAsUser"]
    assert int(gid) == values["podSecurityContext"]["runAsGroup"]
    assert stage_args(RUNTIME)["UID"] == uid


def test_entrypoint_cmd_port_and_read_only_friendly_layout() -> None:
    assert json.loads(RUNTIME.last("ENTRYPOINT").args) == ["rag-monitor"]
    assert json.loads(RUNTIME.last("CMD").args) == ["run"]
    assert RUNTIME.last("EXPOSE").args == "9820"
    values = yaml.safe_load(CHART_VALUES.read_text())
    workdir = resolve(RUNTIME.last("WORKDIR").args, stage_args(RUNTIME))
    assert workdir == values["dataDir"] == "/var/lib/rag-monitor"
    assert set(json.loads(RUNTIME.last("VOLUME").args)) == {workdir, "/tmp"}
    env = RUNTIME.last("ENV").args
    for setting in ("PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp", "XDG_CACHE_HOME=/tmp/.cache"):
        assert setting in env


def test_healthcheck_uses_python_urllib_against_healthz() -> None:
    healthcheck = RUNTIME.last("HEALTHCHECK").args
    options, _, command = healthcheck.partition("CMD ")
    assert "--interval=" in options and "--timeout=" in options
    argv = json.loads(command)
    assert argv[:2] == ["python", "-c"]
    assert "urllib.request" in argv[2] and "/healthz" in argv[2]
    text = DOCKERFILE.read_text()
    assert "curl" not in text.replace("No curl", "") and "wget" not in text


def test_only_runtime_dependencies_with_ragas_as_a_build_argument() -> None:
    assert stage_args(BUILD)["EXTRAS"] == ""
    install = " ".join(r.args for r in CI_RUNS)
    assert "${EXTRAS:+[${EXTRAS}]}" in install
    assert "[dev]" not in DOCKERFILE.read_text()
    assert "pip wheel --no-deps" in install
    assert len(CI_RUNS) == 2


def test_dockerignore_sends_only_what_the_wheel_needs() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*"
    included = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    for copy in BUILD.all("COPY"):
        for source in copy.args.split()[:-1]:
            assert source.rstrip("/") in included, f"COPY {source} is excluded by .dockerignore"
    assert included == {"pyproject.toml", "README.md", "monitor"}
    assert "**/*.so" in patterns, "stale compiled modules of a checkout stay out of the build"


# --- the install steps, for real ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAGMON_", "PIP_", "VIRTUAL_ENV", "PYTHON"))
    }
    env.update(extra)
    return env


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_install_steps_build_and_run_the_daemon(tmp_path: Path) -> None:
    src, wheels, venv = tmp_path / "src", tmp_path / "wheels", tmp_path / "venv"
    data = tmp_path / "data"
    data.mkdir()
    # COPY: the build context (what .dockerignore lets through) into WORKDIR.
    src.mkdir()
    for copy in BUILD.all("COPY"):
        *sources, dest = copy.args.split()
        for source in sources:
            target = src / dest / Path(source).name if dest.endswith("/") else src / dest
            if (ROOT / source).is_dir():
                shutil.copytree(
                    ROOT / source,
                    target,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"),
                )
            else:
                shutil.copy2(ROOT / source, target)
    args = stage_args(BUILD) | {"SRC": str(src), "WHEELS": str(wheels), "VENV": str(venv)}
    started = time.monotonic()
    for run in CI_RUNS:
        result = subprocess.run(
            ["/bin/sh", "-c", run.args],
            cwd=src,
            env=_clean_env(**args),
            capture_output=True,
            text=True,
            timeout=420,
        )
        assert result.returncode == 0, (
            f"Dockerfile line {run.line} failed:\n{result.stderr[-3000:]}"
        )
    # Compiling (mypyc, then the C compiler) took 1-1.7 minutes on the shared 2-core machine.
    assert time.monotonic() - started < 420

    # The wheel holds the package and nothing else (no tests, dashboards or charts), with the
    # modules of monitor.compiled compiled (their shared mypyc runtime beside the package).
    (wheel,) = wheels.glob("rag_monitor-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert all(n.startswith(("monitor/", "rag_monitor-", "rag_monitor__mypyc.")) for n in names), (
        names
    )
    extensions = {n.split(".")[0].replace("/", ".") for n in names if n.endswith(".so")}
    assert extensions == {*MODULES, "rag_monitor__mypyc"}, extensions
    # Package data: the review page's template and style sheet ship inside the package.
    assert {
        "monitor/review/templates/review.html.j2",
        "monitor/review/templates/review.css",
    } <= set(names)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

    runtime_env = _clean_env(
        PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        HOME=str(tmp_path),
        XDG_CACHE_HOME=str(tmp_path / ".cache"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    entrypoint = str(venv / "bin" / "rag-monitor")
    result = subprocess.run(
        [entrypoint, "--version"], capture_output=True, text=True, env=runtime_env, timeout=60
    )
    assert result.returncode == 0 and result.stdout.strip() == f"rag-monitor {version}"
    # Compiled, tier 0 scores every item of the dev data exactly as the sources do.
    result = subprocess.run(
        [str(venv / "bin" / "python"), str(ROOT / "bench" / "tier0_fingerprint.py"), "--installed"],
        capture_output=True,
        text=True,
        env=runtime_env,
        cwd=data,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(MODULES)} of {len(MODULES)} compilable modules compiled" in result.stdout
    assert "scored exactly as recorded" in result.stdout
    result = subprocess.run(
        [entrypoint, "check-config"],
        capture_output=True,
        text=True,
        env=runtime_env,
        cwd=data,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["http"]["port"] == 9820
    bad = subprocess.run(
        [entrypoint, "check-config"],
        capture_output=True,
        text=True,
        env=runtime_env | {"RAGMON_HTTP__PORT": "not-a-port"},
        cwd=data,
        timeout=60,
    )
    assert bad.returncode == 2 and "http.port" in bad.stderr

    # The image's HEALTHCHECK, run as Docker would (exec form, `python` from the venv on PATH),
    # against the installed daemon running in its data directory.
    healthcheck = json.loads(RUNTIME.last("HEALTHCHECK").args.partition("CMD ")[2])
    port = _free_port()
    daemon_env = runtime_env | {"RAGMON_HTTP__PORT": str(port), "RAGMON_LOG__FORMAT": "json"}

    def check() -> int:
        return subprocess.run(
            healthcheck, env=daemon_env, capture_output=True, timeout=30
        ).returncode

    assert check() != 0, "healthy before the daemon started?"
    daemon = subprocess.Popen(
        [entrypoint, "run", "--source", "file:-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=daemon_env,
        cwd=data,
    )
    try:
        deadline = time.monotonic() + 60
        while check() != 0:
            assert daemon.poll() is None, daemon.communicate()[0].decode()[-3000:]
            assert time.monotonic() < deadline, "the HEALTHCHECK never passed"
            time.sleep(0.5)
        # The installed package renders the review page from its own template files.
        page = _review_page(port, deadline=time.monotonic() + 30)
        assert "<h1>Worst answers</h1>" in page and "No scored answers in this window" in page
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            exposition = response.read().decode()
        assert 'compiled="true"' in exposition.partition("ragmon_build_info{")[2].split("}")[0]
    finally:
        try:  # closing stdin ends the file source: the daemon finishes and exits
            output = daemon.communicate(input=b"", timeout=60)[0].decode()
        except subprocess.TimeoutExpired:
            daemon.kill()
            output = daemon.communicate()[0].decode()
    assert daemon.returncode == 0, output[-3000:]
    assert check() != 0, "healthy after the daemon stopped?"
    # Whatever the daemon wrote went to its working directory (the image's data volume).
    written = {p.name for p in data.iterdir()}
    assert written <= {"ragmon.db", "ragmon.db-journal", "ragmon.db-wal", "ragmon.db-shm"}, written


def _review_page(port: int, deadline: float) -> str:
    """GET /review from the daemon once its store is open (503 until then)."""
    url = f"http://127.0.0.1:{port}/review"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            assert exc.code == 503 and time.monotonic() < deadline, exc
        time.sleep(0.5)


def test_the_ci_commands_are_plain_sh() -> None:
    for run in CI_RUNS:
        shlex.split(run.args)  # parses as a POSIX shell command line
        assert not run.args.startswith("["), "exec form would bypass the shell and its ${...}"
