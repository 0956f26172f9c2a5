"""Golden-set files: retrieval and generation suites (YAML, JSONL, JSON) and label files.

Every loading error must name the file, the line and the field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.golden.dataset import (
    GenerationSuite,
    RetrievalSuite,
    field_path,
    load_generation_suite,
    load_labels,
    load_retrieval_suite,
    load_suite,
    parse_generation_jsonl,
    parse_generation_yaml,
    parse_labels_jsonl,
    parse_retrieval_jsonl,
    parse_retrieval_yaml,
)
from monitor.golden.trec import GoldenDataError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "golden"
FIXTURES = ROOT / "tests" / "fixtures" / "golden"

GOOD = """\
dataset:
  version: "1.0"
  created: 2026-02-02
  total_queries: 2
queries:
  - id: "Q001"
    query: "RESTful Webサービスのハンドラキュー構成"
    category: "handler_queue"
    expected_docs:
      - doc_id: "doc_rest_handler_queue_001"
        relevance: 3
        description: "REST用ハンドラキュー設定ガイド"
      - doc_id: "doc_handler_queue_general_001"
        relevance: 2
    metadata:
      language: "ja"
      query_type: "documentation"
      difficulty: "medium"
  - id: Q002
    query: handler queue order
    expected_docs:
      - {doc_id: 1234, relevance: 1}
"""


def _error(text: str) -> GoldenDataError:
    with pytest.raises(GoldenDataError) as info:
        parse_retrieval_yaml(text, path="suite.yaml")
    return info.value


# --------------------------------------------------------------------------- retrieval YAML


def test_the_documented_format_loads() -> None:
    suite = parse_retrieval_yaml(GOOD, path="suite.yaml")
    assert isinstance(suite, RetrievalSuite)
    assert suite.dataset.version == "1.0"
    assert suite.dataset.created == "2026-02-02"  # YAML's date becomes text
    first, second = suite.queries
    assert first.id == "Q001" and first.category == "handler_queue"
    assert first.language == "ja" and first.difficulty == "medium"
    assert first.metadata.query_type == "documentation"
    assert first.expected_docs[0].description == "REST用ハンドラキュー設定ガイド"
    assert second.category is None and second.language is None
    # a numeric id is read as text
    assert suite.qrels() == {
        "Q001": {"doc_rest_handler_queue_001": 3, "doc_handler_queue_general_001": 2},
        "Q002": {"1234": 1},
    }


def test_examples_load() -> None:
    retrieval = load_retrieval_suite(EXAMPLES / "retrieval.yaml")
    assert len(retrieval.queries) == retrieval.dataset.total_queries == 6
    assert {q.language for q in retrieval.queries} == {"ja", "en", "mixed"}
    generation = load_generation_suite(EXAMPLES / "generation.yaml")
    assert [c.no_context for c in generation.queries].count(True) == 2
    assert {c.language for c in generation.queries} == {"en", "ja"}


def test_grade_out_of_range_names_line_and_field() -> None:
    error = _error(GOOD.replace("relevance: 2", "relevance: 5"))
    assert error.path == "suite.yaml"
    assert error.line == 14  # the line of "relevance: 5"
    assert error.field == "queries[0].expected_docs[1].relevance"
    assert str(error).startswith("suite.yaml:14 [queries[0].expected_docs[1].relevance]: ")
    assert "less than or equal to 3" in str(error) and "got 5" in str(error)


def test_grade_must_be_an_integer() -> None:
    error = _error(GOOD.replace("relevance: 3", 'relevance: "3"'))
    assert (error.line, error.field) == (11, "queries[0].expected_docs[0].relevance")
    error = _error(GOOD.replace("relevance: 3", "relevance: high"))
    assert error.line == 11 and "integer" in str(error)


def test_missing_field_names_the_item() -> None:
    error = _error(GOOD.replace("    query: handler queue order\n", ""))
    assert error.field == "queries[1].query"
    assert error.line == 19  # the item "- id: Q002" that lacks it
    assert "Field required" in str(error)


def test_unknown_key_is_an_error() -> None:
    error = _error(GOOD.replace('    category: "handler_queue"', '    categroy: "handler_queue"'))
    assert (error.line, error.field) == (8, "queries[0].categroy")
    assert "Extra inputs are not permitted" in str(error)


def test_first_problem_in_the_file_is_reported() -> None:
    text = GOOD.replace("relevance: 1}", "relevance: 9}").replace(
        '  - id: "Q001"', '  - id: "Q001"\n    bogus: 1'
    )
    error = _error(text)
    assert error.field == "queries[0].bogus" and error.line == 7
    assert "1 more problem" in str(error)


def test_metadata_is_free_form() -> None:
    suite = parse_retrieval_yaml(GOOD.replace('difficulty: "medium"', "specificity: fqcn"))
    assert suite.queries[0].difficulty is None
    assert suite.queries[0].metadata.model_extra == {"specificity": "fqcn"}


def test_duplicate_query_id() -> None:
    error = _error(GOOD.replace("  - id: Q002", '  - id: "Q001"'))
    assert (error.line, error.field) == (19, "queries[1].id")
    assert "query id 'Q001' repeats (first on line 6)" in str(error)


def test_duplicate_doc_id_within_a_query() -> None:
    error = _error(GOOD.replace("doc_handler_queue_general_001", "doc_rest_handler_queue_001"))
    assert (error.line, error.field) == (13, "queries[0].expected_docs[1].doc_id")
    assert "repeats (first on line 10)" in str(error)


def test_duplicate_yaml_key() -> None:
    error = _error(GOOD.replace('    category: "handler_queue"', '    query: "again"'))
    assert (error.line, error.field) == (8, "queries[0].query")
    assert "duplicate key 'query' (first on line 7)" in str(error)


def test_total_queries_must_match() -> None:
    error = _error(GOOD.replace("total_queries: 2", "total_queries: 50"))
    assert (error.line, error.field) == (4, "dataset.total_queries")
    assert "says 50 queries but the file holds 2" in str(error)


def test_yaml_syntax_error_names_the_line() -> None:
    error = _error("queries:\n  - id: a\n    query: [unclosed\n")
    assert error.line == 4 and error.field is None  # the scanner stops at the end
    assert "not valid YAML" in str(error)
    error = _error("queries:\n  - id: a\n   bad indent: x\n")
    assert error.line == 3


def test_shape_errors() -> None:
    assert "empty" in str(_error(""))
    error = _error("just text")
    assert error.line == 1 and "mapping" in str(error)
    error = _error("queries: []")
    assert error.field == "queries" and "at least 1" in str(error)
    error = _error("queries:\n  - id: a\n    query: q\n    expected_docs: []\n")
    assert (error.line, error.field) == (4, "queries[0].expected_docs")


def test_top_level_list_is_the_queries() -> None:
    text = (
        "- {id: a, query: q, expected_docs: [{doc_id: d, relevance: 3}]}\n"
        "- {id: b, query: r, expected_docs: [{doc_id: d, relevance: 7}]}\n"
    )
    error = _error(text)
    assert (error.line, error.field) == (2, "queries[1].expected_docs[0].relevance")


def test_field_path() -> None:
    assert field_path(("queries", 3, "expected_docs", 1, "relevance")) == (
        "queries[3].expected_docs[1].relevance"
    )
    assert field_path(()) == ""


# --------------------------------------------------------------------------- retrieval JSONL / JSON


def _jsonl(*records: object) -> list[str]:
    return [json.dumps(r, ensure_ascii=False) if not isinstance(r, str) else r for r in records]


def test_jsonl_loads_and_errors_name_line_and_field() -> None:
    good = {"id": "q1", "query": "x", "expected_docs": [{"doc_id": "a", "relevance": 3}]}
    suite = parse_retrieval_jsonl(_jsonl(good, "", {**good, "id": "q2"}), path="s.jsonl")
    assert [q.id for q in suite.queries] == ["q1", "q2"]

    bad = {**good, "id": "q2", "expected_docs": [{"doc_id": "a", "relevance": 2}, {"doc": "b"}]}
    with pytest.raises(GoldenDataError) as info:
        parse_retrieval_jsonl(_jsonl(good, "", bad), path="s.jsonl")
    assert (info.value.path, info.value.line) == ("s.jsonl", 3)
    assert info.value.field in ("expected_docs[1].doc_id", "expected_docs[1].doc")

    with pytest.raises(GoldenDataError) as info:
        parse_retrieval_jsonl(_jsonl(good, "{not json"), path="s.jsonl")
    assert info.value.line == 2 and "not valid JSON" in str(info.value)

    with pytest.raises(GoldenDataError) as info:
        parse_retrieval_jsonl(_jsonl(good, "[1, 2]"), path="s.jsonl")
    assert info.value.line == 2 and "JSON object" in str(info.value)

    with pytest.raises(GoldenDataError) as info:
        parse_retrieval_jsonl(_jsonl(good, good), path="s.jsonl")
    assert (info.value.line, info.value.field) == (2, "id")
    assert "first on line 1" in str(info.value)

    with pytest.raises(GoldenDataError, match="no queries"):
        parse_retrieval_jsonl(["", "  "], path="s.jsonl")


def test_files_by_suffix(tmp_path: Path) -> None:
    record = {"id": "q1", "query": "x", "expected_docs": [{"doc_id": "a", "relevance": 3}]}
    (tmp_path / "s.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    (tmp_path / "s.json").write_text(
        json.dumps({"queries": [record, {**record, "id": "q2", "query": ""}]}, indent=2),
        encoding="utf-8",
    )
    assert load_retrieval_suite(tmp_path / "s.jsonl").queries[0].id == "q1"
    with pytest.raises(GoldenDataError) as info:
        load_retrieval_suite(tmp_path / "s.json")
    # JSON is read through the YAML composer, so the line is known
    assert (info.value.line, info.value.field) == (15, "queries[1].query")
    (tmp_path / "s.txt").write_text("", encoding="utf-8")
    with pytest.raises(GoldenDataError, match="unknown suite format"):
        load_retrieval_suite(tmp_path / "s.txt")
    with pytest.raises(GoldenDataError, match="file not found") as info:
        load_retrieval_suite(tmp_path / "absent.yaml")
    assert info.value.line is None
    (tmp_path / "latin1.yaml").write_bytes(b"queries: [caf\xe9]")
    with pytest.raises(GoldenDataError, match="UTF-8"):
        load_retrieval_suite(tmp_path / "latin1.yaml")


def test_tab_indented_json_still_loads(tmp_path: Path) -> None:
    record = {"id": "q1", "query": "x", "expected_docs": [{"doc_id": "a", "relevance": 3}]}
    path = tmp_path / "tabs.json"
    path.write_text(json.dumps({"queries": [record]}, indent="\t"), encoding="utf-8")
    assert load_retrieval_suite(path).queries[0].id == "q1"
    assert isinstance(load_suite(path, "retrieval"), RetrievalSuite)
    # YAML cannot read tab indentation: the field is still named, the line is not known
    path.write_text(json.dumps({"queries": [{**record, "query": ""}]}, indent="\t"))
    with pytest.raises(GoldenDataError) as info:
        load_retrieval_suite(path)
    assert (info.value.line, info.value.field) == (None, "queries[0].query")
    path.write_text('{"queries": [\n\t{"id": }]}')
    with pytest.raises(GoldenDataError) as info:
        load_retrieval_suite(path)
    assert info.value.line == 2 and "not valid JSON" in str(info.value)


# --------------------------------------------------------------------------- generation


def test_generation_suite_seed_001_format() -> None:
    suite = load_generation_suite(FIXTURES / "e2e_generation.yaml")
    assert isinstance(suite, GenerationSuite)
    first = suite.queries[0]
    # the singular spelling is accepted too
    assert first.contexts == [
        "Python is a high-level, general-purpose programming language.",
        "Python was created by Guido van Rossum in 1991.",
    ]
    assert first.must_not_contain == ["C++", "Java is better"]
    no_context = suite.queries[2]
    assert no_context.no_context and no_context.contexts == [] and no_context.reference is None
    assert suite.queries[1].language == "ja"


def test_generation_errors() -> None:
    with pytest.raises(GoldenDataError) as info:
        parse_generation_yaml(
            "queries:\n  - id: a\n    question: q\n    expected_topics: [x, '  ']\n", path="g.yaml"
        )
    assert (info.value.line, info.value.field) == (4, "queries[0].expected_topics")
    assert "blank" in str(info.value)
    with pytest.raises(GoldenDataError) as info:
        parse_generation_yaml("- {id: a, question: q, no_context: maybe}\n", path="g.yaml")
    assert (info.value.line, info.value.field) == (1, "queries[0].no_context")
    with pytest.raises(GoldenDataError) as info:
        parse_generation_jsonl(
            ['{"id": "a", "question": "q"}', '{"id": "b", "question": "q", "contexts": "x"}'],
            path="g.jsonl",
        )
    assert (info.value.line, info.value.field) == (2, "contexts")
    suite = parse_generation_jsonl(['{"id": "a", "question": "q", "context": ["c"]}'])
    assert suite.queries[0].contexts == ["c"]


# --------------------------------------------------------------------------- labels


def test_label_files(tmp_path: Path) -> None:
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text(
        '{"query_id": "q1", "doc_id": "d1", "grade": 2, "annotator": "x"}\n'
        '{"query_id": "q1", "doc_id": 7, "grade": 0}\n',
        encoding="utf-8",
    )
    assert load_labels(jsonl) == {("q1", "d1"): 2, ("q1", "7"): 0}
    assert load_labels(FIXTURES / "tiny.qrels")[("q1", "d3")] == 1
    assert load_labels(EXAMPLES / "retrieval.yaml")[("Q001", "doc_jaxrs_setup_001")] == 1
    with pytest.raises(GoldenDataError) as info:
        parse_labels_jsonl(['{"query_id": "q", "doc_id": "d", "grade": 1}'] * 2, path="a.jsonl")
    assert (info.value.line, info.value.field) == (2, "doc_id")
    with pytest.raises(GoldenDataError) as info:
        parse_labels_jsonl(['{"query_id": "q", "doc_id": "d", "grade": 1.5}'], path="a.jsonl")
    assert (info.value.line, info.value.field) == (1, "grade")
