"""``rag-monitor golden ...`` through :func:`register` on a fresh parser and :func:`dispatch`.

``golden score`` is checked against small project fixtures and against NIST trec_eval's own
outputs and the JQaRA figures (``data/retrieval``, shipped with the project). ``golden run`` runs
a suite against a real HTTP service started in a background thread.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from monitor.config import load_settings
from monitor.golden.cli import dispatch, landis_koch, register
from monitor.golden.results import RunResult
from tests.fixtures.golden.service import (
    RETRIEVAL_SUITE,
    RunningService,
    ServiceState,
    retrieval_app,
    service_in_thread,
)
from tests.support.dev_data import dev_data_path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "golden"
TOL = 1e-4


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """``golden run`` configures logging to the stderr of the moment; undo it afterwards."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag-monitor")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    return parser


def run_cli(*argv: str) -> tuple[int, str]:
    args = _parser().parse_args(["golden", *argv])
    out = io.StringIO()
    code = dispatch(args, out=out)
    return code, out.getvalue()


def _table(text: str) -> dict[str, dict[str, str]]:
    """trec_eval-style ``measure <tab> qid <tab> value`` lines -> {qid: {measure: value}}."""
    table: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        measure, qid, value = (part.strip() for part in line.split("\t"))
        table.setdefault(qid, {})[measure] = value
    return table


# --------------------------------------------------------------------------- score: fixtures


def test_score_seed_conventions_on_tiny_fixtures() -> None:
    code, out = run_cli(
        "score", "--qrels", str(FIXTURES / "tiny.qrels"), "--run", str(FIXTURES / "tiny.run"),
        "--k", "5",
    )  # fmt: skip
    assert code == 0
    table = _table(out)["all"]
    # q1: ranked d3 (0.9), then the 0.5 ties by doc id descending: a, 9, 10. Relevant (>= 2):
    # only "9", at rank 3 -> RR 1/3. q2 has no relevant document, q3 is not in the run (zero).
    assert table["num_q"] == "3"
    assert table["recip_rank"] == f"{(1 / 3) / 3:.4f}"  # 0.1111
    assert table["P_5"] == f"{(1 / 5) / 3:.4f}"  # 0.0667
    # nDCG q1, gain 2^g - 1: DCG = 1/1 + 3/log2(4) = 2.5; IDCG = 3 + 1/log2(3) = 3.63093
    assert table["ndcg"] == f"{(2.5 / (3 + 1 / 1.5849625)) / 3:.4f}"  # 0.2295
    assert out.splitlines()[0] == f"{'num_q':<22}\tall\t3"


def test_score_trec_eval_preset_on_tiny_fixtures() -> None:
    code, out = run_cli(
        "score", "--qrels", str(FIXTURES / "tiny.qrels"), "--run", str(FIXTURES / "tiny.run"),
        "--trec-eval", "--k", "1", "-q",
    )  # fmt: skip
    assert code == 0
    table = _table(out)
    # threshold 1, linear gain, q3 skipped: q1 RR 1 (d3, grade 1, first); q2 0
    assert set(table) == {"q1", "q2", "all"}
    assert table["all"]["num_q"] == "2" and table["all"]["recip_rank"] == "0.5000"
    # q1 nDCG linear: DCG = 1 + 2/log2(4) = 2; IDCG = 2 + 1/log2(3) = 2.63093 -> 0.7602
    assert table["q1"]["ndcg"] == "0.7602" and table["q2"]["ndcg"] == "0.0000"
    # explicit options override the preset
    code, out = run_cli(
        "score", "--qrels", str(FIXTURES / "tiny.qrels"), "--run", str(FIXTURES / "tiny.run"),
        "--trec-eval", "--missing-queries", "zero",
    )  # fmt: skip
    assert _table(out)["all"]["num_q"] == "3"


def test_score_stable_tie_break_and_json() -> None:
    code, out = run_cli(
        "score", "--qrels", str(FIXTURES / "tiny.qrels"), "--run", str(FIXTURES / "tiny.run"),
        "--tie-break", "stable", "--k", "2,5", "--json", "--per-query",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    # file order for q1: 10, 9, d3, a -> "9" (grade 2) at rank 2
    assert doc["per_query"]["q1"]["recip_rank"] == 0.5
    assert doc["all"]["recip_rank"] == pytest.approx(0.5 / 3)
    assert doc["conventions"] == {
        "gain": "exponential",
        "tie_break": "stable",
        "relevance_threshold": 2,
        "missing_queries": "zero",
        "cutoffs": [2, 5],
    }
    assert doc["num_q"] == 3 and doc["coverage"] == pytest.approx(2 / 3)  # q3 returned nothing
    assert list(doc["all"]) == [
        "recip_rank", "ndcg",
        "recip_rank_cut_2", "P_2", "recall_2", "success_2", "ndcg_cut_2",
        "recip_rank_cut_5", "P_5", "recall_5", "success_5", "ndcg_cut_5",
    ]  # fmt: skip


def test_score_data_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run_cli(
        "score", "--qrels", str(FIXTURES / "bad_grade.qrels"), "--run", str(FIXTURES / "tiny.run")
    )
    assert code == 2
    assert (
        "bad_grade.qrels:2 [grade]: grade must be an integer, got 'high'" in capsys.readouterr().err
    )
    code, _ = run_cli(
        "score",
        "--qrels",
        str(FIXTURES / "tiny.qrels"),
        "--run",
        str(FIXTURES / "duplicate_doc.run"),
    )
    assert code == 2
    assert "duplicate_doc.run:3 [docid]" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        run_cli("score", "--qrels", "q", "--run", "r", "--k", "5,x")
    assert info.value.code == 2


def test_score_help_documents_the_conventions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["golden", "score", "--help"])
    text = capsys.readouterr().out
    for needle in (
        "--trec-eval",
        "id descending in byte order",
        "2^grade - 1",
        "trec_eval -c",
        "--gain linear --tie-break trec_eval --relevance-threshold 1",
    ):
        assert needle in text, needle


# ------------------------------------------------------------------- score: trec_eval, JQaRA

_CUT = re.compile(r"^(P|recall|success|ndcg_cut)_(\d+)$")
_COMPARED = re.compile(r"^(recip_rank|ndcg|(P|recall|success|ndcg_cut)_\d+)$")


@pytest.mark.parametrize(
    ("qrels_name", "out_name", "level", "preset"),
    [
        ("qrels.test", "out.test.aq", 1, True),
        ("qrels.test", "out.test.aq", 1, False),
        ("qrels.rel_level", "out.test.aql", 2, True),
        ("qrels.test", "out.test.meas_params", 1, True),
    ],
)
def test_score_reproduces_trec_eval(
    qrels_name: str, out_name: str, level: int, preset: bool
) -> None:
    base = dev_data_path("retrieval", "trec_eval")
    expected = _table(dev_data_path("retrieval", "trec_eval", out_name).read_text())
    measures = {m for values in expected.values() for m in values}
    cutoffs = sorted({int(m.group(2)) for m in map(_CUT.match, measures) if m})
    conventions = (
        ["--trec-eval"]
        if preset
        else ["--gain", "linear", "--tie-break", "trec_eval"]  # every judged query is in the run
    )
    code, out = run_cli(
        "score", "--qrels", str(base / qrels_name), "--run", str(base / "results.test"),
        *conventions, "--relevance-threshold", str(level),
        "--k", ",".join(map(str, cutoffs)), "--json", "--per-query",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    ours = {**doc["per_query"], "all": doc["all"]}
    compared = 0
    mismatches = []
    for qid, values in expected.items():
        for measure, text in values.items():
            if not _COMPARED.match(measure):
                continue
            compared += 1
            if abs(ours[qid][measure] - float(text)) > TOL:
                mismatches.append((qid, measure, ours[qid][measure], text))
    assert not mismatches, mismatches
    assert compared >= 20
    assert doc["num_q"] == 3


JQARA_CONVENTIONS = {
    "stable": "expected_using_rank_column",
    "trec_eval": "expected_using_trec_eval_convention(score desc, docno desc)",
}


@pytest.mark.parametrize("tie_break", ["stable", "trec_eval"])
def test_score_reproduces_jqara(tie_break: str) -> None:
    expected_doc = json.loads(
        dev_data_path("retrieval", "jqara", "jqara_expected_metrics.json").read_text()
    )
    qrels = dev_data_path("retrieval", "jqara", "qrels.trec")
    run_name = "jqara_bm25.top10.trec"
    expected = expected_doc["top10_files"][run_name][JQARA_CONVENTIONS[tie_break]]
    run_file = dev_data_path("retrieval", "jqara", run_name)
    code, out = run_cli(
        "score", "--qrels", str(qrels), "--run", str(run_file),
        "--gain", "linear", "--relevance-threshold", "1", "--tie-break", tie_break,
        "--k", "5,10", "--json",
    )  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    assert doc["num_q"] == 1667
    ours = {
        "ndcg@5": doc["all"]["ndcg_cut_5"],
        "mrr@5": doc["all"]["recip_rank_cut_5"],
        "recall@5": doc["all"]["recall_5"],
        "ndcg@10": doc["all"]["ndcg_cut_10"],
        "mrr@10": doc["all"]["recip_rank_cut_10"],
        "recall@10": doc["all"]["recall_10"],
    }
    assert set(ours) == set(expected)
    for name, value in expected.items():
        assert ours[name] == pytest.approx(value, abs=TOL), name


# --------------------------------------------------------------------------- run


@pytest.fixture
def service() -> Iterator[tuple[RunningService, ServiceState]]:
    state = ServiceState()
    with service_in_thread(retrieval_app(state)) as running:
        yield running, state


def _write_config(tmp_path: Path, url: str, **suite: Any) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copy(RETRIEVAL_SUITE, tmp_path / "golden.yaml")
    config = {
        "golden": {
            "suites": [
                {
                    "name": "search",
                    "dataset": "golden.yaml",  # relative to the config file
                    "service": {
                        "url": url,
                        "request_template": {"query": "{{query}}", "top_k": 10, "mode": "{{mode}}"},
                        "response": {"doc_ids": "results[*].id"},
                        "backoff_seconds": 0.01,
                    },
                    "cutoffs": [5, 10],
                    "modes": {
                        "A": {"description": "ideal", "params": {"mode": "ideal"}},
                        "B": {"description": "shifted", "params": {"mode": "shifted"}},
                    },
                    "bootstrap_resamples": 500,
                    **suite,
                }
            ]
        }
    }
    path = tmp_path / "config" / "rag-monitor.yaml"
    path.parent.mkdir()
    shutil.move(tmp_path / "golden.yaml", path.parent / "golden.yaml")
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


def test_run_passes_and_writes_the_report(
    service: tuple[RunningService, ServiceState], tmp_path: Path
) -> None:
    running, state = service
    config = _write_config(tmp_path, running.url + "/search", gate_modes=["A"])
    code, out = run_cli(
        "run", "search", "--config", str(config), "--report", str(tmp_path / "r" / "search.md"),
        "--no-progress",
    )  # fmt: skip
    assert code == 0, out
    assert out.splitlines()[0] == "golden suite search: PASSED"
    report = (tmp_path / "r" / "search.md").read_text(encoding="utf-8")
    assert "**B** is significantly worse than **A** on MRR" in report
    result = RunResult.model_validate_json((tmp_path / "r" / "search.json").read_text())
    assert result.mode("A").metrics["mrr"] == 1.0
    assert state.bodies[0]["top_k"] == 10


def test_run_exit_1_when_a_target_is_missed(
    service: tuple[RunningService, ServiceState], tmp_path: Path
) -> None:
    running, _ = service
    config = _write_config(tmp_path, running.url + "/search", report_dir="reports")
    code, out = run_cli("run", "search", "--config", str(config), "--no-progress")
    assert code == 1
    assert "golden suite search: FAILED -- missed: B mrr=0.361 (>= 0.7), B ndcg_5=0.557" in out
    # without --report: the configured report_dir, relative to the config file
    reports = list((config.parent / "reports" / "search").glob("*.md"))
    assert len(reports) == 1 and reports[0].with_suffix(".json").exists()


def test_run_prints_the_report_without_a_destination(
    service: tuple[RunningService, ServiceState],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    running, _ = service
    config = _write_config(
        tmp_path, running.url + "/search", modes={"A": {"params": {"mode": "ideal"}}}
    )
    code, out = run_cli("run", "search", "--config", str(config), "--no-progress")
    assert code == 0
    assert out.startswith("# 検索品質評価レポート / Retrieval quality report: search\n")
    assert "golden suite search: PASSED" in capsys.readouterr().err


def test_run_exit_2_on_configuration_and_data_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write_config(tmp_path, "http://127.0.0.1:9/search")
    code, _ = run_cli("run", "nope", "--config", str(config))
    assert code == 2 and "no golden suite named 'nope' (known: search)" in capsys.readouterr().err

    bad = _write_config(tmp_path / "b", "http://127.0.0.1:9/search", targets={"recall_7": 1})
    code, _ = run_cli("run", "search", "--config", str(bad))
    assert code == 2 and "needs cutoff 7" in capsys.readouterr().err

    dataset = config.parent / "golden.yaml"
    dataset.write_text(dataset.read_text().replace("relevance: 3", "relevance: 9", 1))
    code, _ = run_cli("run", "search", "--config", str(config))
    err = capsys.readouterr().err
    assert code == 2
    assert "golden.yaml:13 [queries[0].expected_docs[0].relevance]" in err


def test_run_exit_3_when_the_service_is_down(tmp_path: Path) -> None:
    config = _write_config(
        tmp_path,
        "http://127.0.0.1:9/search",
        service={
            "url": "http://127.0.0.1:9/search",
            "response": {"doc_ids": "results[*].id"},
            "retries": 0,
        },
        modes={"A": {}},
    )
    code, out = run_cli(
        "run", "search", "--config", str(config), "--report", str(tmp_path / "x.md")
    )
    assert code == 3
    assert "ERROR -- error: mode A: 12 of 12 queries failed" in out
    assert "- Outcome: **ERROR**" in (tmp_path / "x.md").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- agreement, validate


def test_agreement_fixed_values() -> None:
    code, out = run_cli(
        "agreement", str(FIXTURES / "annotator_a.jsonl"), str(FIXTURES / "annotator_b.qrels"),
        "--weighted",
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    # 8 shared items, 6 alike -> p_o = 0.75; A's marginals are 1/4 each -> p_e = 0.25;
    # kappa = (0.75 - 0.25) / 0.75 = 0.6667
    assert lines[0] == "items labelled by both: 8 (only in A: 1, only in B: 2)"
    assert lines[1] == "observed agreement:     0.7500"
    assert lines[2] == "Cohen's kappa:          0.6667 (substantial)"
    # quadratic: the two disagreements are one grade apart (weight 1/9 each):
    # p_o = 1 - 2/72 = 0.97222; p_e = 1 - 0.25 * 9 / 9 = 0.75 -> (0.97222 - 0.75) / 0.25
    assert lines[3] == "quadratic weighted kappa: 0.8889 (almost perfect)"
    assert "confusion (rows A, columns B):" in out
    assert "     0     1     1     0     0" in out  # A's two 0s: B said 0 once, 1 once
    assert "     3     0     0     0     2" in out


def test_agreement_json_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli(
        "agreement",
        str(FIXTURES / "annotator_b.qrels"),
        str(FIXTURES / "annotator_a.jsonl"),
        "--json",
    )
    doc = json.loads(out)
    assert code == 0 and doc["items"] == 8 and doc["kappa"] == pytest.approx(2 / 3)
    # B's four 1s: A said 0 once, 1 twice, 2 once
    assert doc["grades"] == [0, 1, 2, 3] and doc["confusion"][1] == [1, 2, 1, 0]
    assert "weighted_kappa" not in doc
    other = tmp_path / "other.jsonl"
    other.write_text('{"query_id": "X", "doc_id": "y", "grade": 1}\n')
    code, _ = run_cli("agreement", str(FIXTURES / "annotator_a.jsonl"), str(other))
    assert code == 2 and "no (query, document) pair" in capsys.readouterr().err
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"query_id": "X", "doc_id": "y", "grade": "two"}\n')
    code, _ = run_cli("agreement", str(broken), str(other))
    assert code == 2 and "broken.jsonl:1 [grade]" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kappa", "name"),
    [(-0.1, "poor"), (0.1, "slight"), (0.22, "fair"), (0.49, "moderate"), (0.7, "substantial"),
     (0.95, "almost perfect")],
)  # fmt: skip
def test_landis_koch(kappa: float, name: str) -> None:
    assert landis_koch(kappa) == name


def test_validate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[1] / "examples" / "golden"
    code, out = run_cli("validate", str(examples / "retrieval.yaml"))
    assert code == 0
    assert out.endswith(
        "ok, 6 retrieval queries (handler_queue 3, api_usage 2, troubleshooting 1)\n"
    )
    code, out = run_cli("validate", str(examples / "generation.yaml"), "--kind", "generation")
    assert code == 0 and "ok, 5 generation queries" in out
    # Without --kind the kind is told from the fields, for YAML and JSONL alike.
    code, out = run_cli("validate", str(examples / "generation.yaml"))
    assert code == 0 and "ok, 5 generation queries" in out
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"id": "a", "question": "q?", "expected_topics": ["x"]}\n')
    code, out = run_cli("validate", str(cases))
    assert code == 0 and "ok, 1 generation queries" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("queries:\n  - {id: a, question: q, colour: red}\n")
    code, _ = run_cli("validate", str(bad))
    assert code == 2 and "bad.yaml:2 [queries[0].colour]" in capsys.readouterr().err
    for path in sorted(examples.glob("*.yaml")):
        for line in path.read_text().splitlines():
            if "golden validate" in line:  # what the examples tell a user to run works
                argv = line.split("golden validate", 1)[1].split()
                argv[0] = str(Path(__file__).resolve().parents[1] / argv[0])
                assert run_cli("validate", *argv)[0] == 0, line


def test_example_config_is_valid() -> None:
    examples = Path(__file__).resolve().parents[1] / "examples" / "golden"
    settings = load_settings(examples / "config.yaml")
    names = [s.name for s in settings.golden.suites]
    assert names == ["search", "answers"]
    search = settings.golden.suite("search")
    assert list(search.modes) == ["A", "B", "C", "D", "E"] and search.effective_baseline == "E"
    assert search.sweeps["alpha"] == [0.0, 0.1, 0.3, 0.5, 0.7, 1.0]
    assert search.resolved_dataset(examples).exists()
    assert settings.golden.suite("answers").resolved_dataset(examples).exists()
