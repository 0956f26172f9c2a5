"""Golden-set files: retrieval suites, generation suites, label files (docs/metrics.md).

Retrieval suite, YAML::

    dataset: {version: "1.0", created: "2026-02-02", total_queries: 2}
    queries:
      - id: Q001
        query: RESTful Webサービスのハンドラキュー構成
        category: handler_queue
        expected_docs:
          - {doc_id: doc_rest_handler_queue_001, relevance: 3, description: ...}
          - {doc_id: doc_handler_queue_general_001, relevance: 2}
        metadata: {language: ja, query_type: documentation, difficulty: medium}

Grades are integers 0-3 (3 perfect, 2 highly relevant, 1 marginally relevant, 0 not
relevant); documents a query does not list are not relevant. The JSONL equivalent holds one
query object a line (the ``queries`` items, no ``dataset`` header). A file whose top level is a
list is read as the ``queries`` list.

Generation suite, YAML with the same envelope or JSONL, one case each::

    - id: qa-001
      language: en                     # expected answer language (en, ja; others unchecked)
      question: What is Python?
      contexts: [...]                  # given to the service; omit for live retrieval
      reference: Python is a high-level ...   # reference answer (for the judge's metrics)
      expected_topics: [programming language, Guido van Rossum]
      must_not_contain: [C++]
      no_context: false                # true: the right answer admits it does not know

(``context`` is accepted for ``contexts``.)

Every problem raises :class:`~monitor.golden.trec.GoldenDataError` naming the file, the line
(for YAML the line of the offending key or item, from the YAML composer's marks; for JSONL the
line of the record) and the field as a path such as ``queries[3].expected_docs[1].relevance``.
Unknown keys are errors, as in the configuration, so a typo cannot silently drop a field;
only ``metadata`` objects are free-form.

Label files for ``golden agreement`` (:func:`load_labels`): TREC qrels, JSONL of
``{"query_id", "doc_id", "grade"}`` or a retrieval suite (its ``expected_docs`` grades).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
)

from monitor.golden.trec import GoldenDataError, load_qrels, read_text

SuiteKind = Literal["retrieval", "generation"]
Loc = tuple[str | int, ...]

UNLABELLED = "(none)"
"""Group label of a query without a category, language or difficulty."""


# --------------------------------------------------------------------------- models


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, coerce_numbers_to_str=True, populate_by_name=True
    )


class DatasetInfo(_Model):
    """The optional ``dataset`` header."""

    name: str | None = None
    version: str | None = None
    created: str | None = None
    total_queries: int | None = Field(default=None, ge=0)
    description: str | None = None

    @field_validator("created", mode="before")
    @classmethod
    def _date_to_text(cls, value: object) -> object:
        # YAML reads an unquoted 2026-02-02 as a date
        if isinstance(value, _dt.date):
            return value.isoformat()
        return value


class ExpectedDoc(_Model):
    doc_id: str = Field(min_length=1)
    relevance: StrictInt = Field(ge=0, le=3)
    description: str | None = None


class QueryMetadata(BaseModel):
    """A query's ``metadata``; further keys are kept as they are."""

    model_config = ConfigDict(extra="allow", frozen=True, coerce_numbers_to_str=True)

    language: str | None = None
    query_type: str | None = None
    difficulty: str | None = None


class RetrievalQuery(_Model):
    id: str = Field(min_length=1)
    query: str = Field(min_length=1)
    category: str | None = None
    expected_docs: list[ExpectedDoc] = Field(min_length=1)
    metadata: QueryMetadata = Field(default_factory=QueryMetadata)

    @property
    def judgments(self) -> dict[str, int]:
        return {doc.doc_id: doc.relevance for doc in self.expected_docs}

    @property
    def language(self) -> str | None:
        return self.metadata.language

    @property
    def difficulty(self) -> str | None:
        return self.metadata.difficulty


class RetrievalSuite(_Model):
    dataset: DatasetInfo = Field(default_factory=DatasetInfo)
    queries: list[RetrievalQuery] = Field(min_length=1)

    def qrels(self) -> dict[str, dict[str, int]]:
        """qid -> {doc_id: grade}, in file order (the form :mod:`ranking` takes)."""
        return {query.id: query.judgments for query in self.queries}


class GenerationCase(_Model):
    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    language: str | None = None
    contexts: list[str] | None = Field(
        default=None, validation_alias=AliasChoices("contexts", "context")
    )
    reference: str | None = None
    expected_topics: list[str] = Field(default_factory=list)
    must_not_contain: list[str] = Field(default_factory=list)
    no_context: bool = False
    category: str | None = None
    difficulty: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("expected_topics", "must_not_contain")
    @classmethod
    def _no_blank_terms(cls, value: list[str]) -> list[str]:
        for index, term in enumerate(value):
            if not term.strip():
                raise ValueError(f"item {index} is blank")
        return value


class GenerationSuite(_Model):
    dataset: DatasetInfo = Field(default_factory=DatasetInfo)
    queries: list[GenerationCase] = Field(min_length=1)


Suite = RetrievalSuite | GenerationSuite
_M = TypeVar("_M", bound=BaseModel)


# --------------------------------------------------------------------------- locations


def field_path(loc: Iterable[str | int]) -> str:
    """A location as text: ``("queries", 3, "expected_docs", 1, "relevance")`` ->
    ``queries[3].expected_docs[1].relevance``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _line_for(loc: Loc, marks: Mapping[Loc, int]) -> int | None:
    """The line of ``loc`` or, for a missing key, of the nearest enclosing node."""
    for end in range(len(loc), -1, -1):
        line = marks.get(loc[:end])
        if line is not None:
            return line
    return None


def _clean_loc(loc: tuple[int | str, ...]) -> Loc:
    # pydantic may add a validator tag to a location; keep the data path only
    return tuple(part for part in loc if isinstance(part, int) or "[" not in part)


def _validation_error(
    exc: ValidationError,
    path: str,
    line_of: Callable[[Loc], int | None],
    prefix: Loc = (),
) -> GoldenDataError:
    errors = exc.errors()
    # report the problem that comes first in the file (pydantic orders by model field)
    located = [(prefix + _clean_loc(tuple(error["loc"])), error) for error in errors]
    ordered = sorted(enumerate(located), key=lambda item: (line_of(item[1][0]) or 0, item[0]))
    loc, first = ordered[0][1]
    message = str(first["msg"])
    value = first.get("input")
    if first["type"] != "missing" and isinstance(value, str | int | float | bool):
        message += f", got {value!r}"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return GoldenDataError(message, path=path, line=line_of(loc), field=field_path(loc) or None)


# --------------------------------------------------------------------------- YAML


def _compose_yaml(text: str, path: str) -> tuple[Any, dict[Loc, int]]:
    """Parse YAML into data plus ``{location: line}`` for every key and list item (1-based)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "syntax error"
        raise GoldenDataError(
            f"not valid YAML: {problem}",
            path=path,
            line=mark.line + 1 if mark is not None else None,
            field=None,
        ) from None
    except yaml.YAMLError as exc:
        raise GoldenDataError(f"not valid YAML: {exc}", path=path, line=None, field=None) from None
    finally:
        loader.dispose()
    marks: dict[Loc, int] = {}
    if node is not None:
        _collect_marks(node, (), marks, path, yaml.SafeLoader(""))
    return data, marks


def _collect_marks(
    node: yaml.Node, loc: Loc, marks: dict[Loc, int], path: str, keys: yaml.SafeLoader
) -> None:
    marks.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[object, int] = {}
        for key_node, value_node in node.value:
            key = keys.construct_object(key_node, deep=True)
            if not isinstance(key, str | int):
                key = str(key)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise GoldenDataError(
                    f"duplicate key {key!r} (first on line {seen[key]})",
                    path=path,
                    line=line,
                    field=field_path((*loc, key)),
                )
            seen[key] = line
            marks[(*loc, key)] = line
            _collect_marks(value_node, (*loc, key), marks, path, keys)
    elif isinstance(node, yaml.SequenceNode):
        for index, child in enumerate(node.value):
            marks[(*loc, index)] = child.start_mark.line + 1
            _collect_marks(child, (*loc, index), marks, path, keys)


def _envelope(data: Any, marks: dict[Loc, int], path: str) -> tuple[Any, dict[Loc, int]]:
    """A top-level list is the ``queries`` list."""
    if isinstance(data, list):
        shifted = {("queries", *loc): line for loc, line in marks.items() if loc}
        shifted[("queries",)] = 1
        shifted[()] = 1
        return {"queries": data}, shifted
    if data is None:
        raise GoldenDataError("the file is empty", path=path, line=None, field=None)
    if not isinstance(data, dict):
        raise GoldenDataError(
            "the top level must be a mapping with 'queries' (or a list of queries)",
            path=path,
            line=1,
            field=None,
        )
    return data, marks


def _parse_structured(text: str, path: str, *, json_only: bool) -> tuple[Any, dict[Loc, int]]:
    if not json_only:
        return _compose_yaml(text, path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GoldenDataError(
            f"not valid JSON: {exc.msg} (column {exc.colno})",
            path=path,
            line=exc.lineno,
            field=None,
        ) from None
    try:  # JSON is YAML: take the lines from the YAML composer when it can read the file
        return data, _compose_yaml(text, path)[1]
    except GoldenDataError:
        return data, {}


def _check_unique(
    items: list[tuple[str, Loc]],
    what: Callable[[str], str],
    path: str,
    line_of: Callable[[Loc], int | None],
    field_of: Callable[[Loc], str | None],
) -> None:
    first: dict[str, Loc] = {}
    for value, loc in items:
        if value in first:
            first_line = line_of(first[value])
            where = f" (first on line {first_line})" if first_line is not None else ""
            raise GoldenDataError(
                f"{what(value)} repeats{where}",
                path=path,
                line=line_of(loc),
                field=field_of(loc),
            )
        first[value] = loc


def _check_suite(
    suite: Suite,
    path: str,
    line_of: Callable[[Loc], int | None],
    field_of: Callable[[Loc], str | None] = field_path,
) -> None:
    """Checks across items: unique query ids, unique doc ids per query, ``total_queries``."""
    items: Sequence[RetrievalQuery | GenerationCase] = suite.queries
    ids: list[tuple[str, Loc]] = [
        (item.id, ("queries", index, "id")) for index, item in enumerate(items)
    ]
    _check_unique(ids, "query id {!r}".format, path, line_of, field_of)
    if isinstance(suite, RetrievalSuite):
        for index, query in enumerate(suite.queries):
            docs: list[tuple[str, Loc]] = [
                (doc.doc_id, ("queries", index, "expected_docs", position, "doc_id"))
                for position, doc in enumerate(query.expected_docs)
            ]
            what = ("doc_id {!r} of query " + repr(query.id)).format
            _check_unique(docs, what, path, line_of, field_of)
    total = suite.dataset.total_queries
    if total is not None and total != len(suite.queries):
        loc: Loc = ("dataset", "total_queries")
        raise GoldenDataError(
            f"says {total} queries but the file holds {len(suite.queries)}",
            path=path,
            line=line_of(loc),
            field=field_of(loc),
        )


def _parse_document(text: str, path: str, model: type[_M], *, json_only: bool = False) -> _M:
    data, marks = _parse_structured(text, path, json_only=json_only)
    data, marks = _envelope(data, marks, path)

    def line_of(loc: Loc) -> int | None:
        return _line_for(loc, marks)

    try:
        suite = model.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc, path, line_of) from None
    assert isinstance(suite, RetrievalSuite | GenerationSuite)
    _check_suite(suite, path, line_of)
    return suite


def _constant_line(line: int) -> Callable[[Loc], int | None]:
    def line_of(_loc: Loc) -> int | None:
        return line

    return line_of


def _parse_jsonl(lines: Iterable[str], path: str, item: type[_M]) -> list[tuple[int, _M]]:
    records: list[tuple[int, _M]] = []
    for line_no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise GoldenDataError(
                f"not valid JSON: {exc.msg} (column {exc.colno})",
                path=path,
                line=line_no,
                field=None,
            ) from None
        if not isinstance(data, dict):
            raise GoldenDataError(
                f"each line must be a JSON object, got {type(data).__name__}",
                path=path,
                line=line_no,
                field=None,
            )
        try:
            records.append((line_no, item.model_validate(data)))
        except ValidationError as exc:
            raise _validation_error(exc, path, _constant_line(line_no)) from None
    if not records:
        raise GoldenDataError("the file holds no queries", path=path, line=None, field=None)
    return records


def _suite_from_jsonl(
    lines: Iterable[str], path: str, item: type[_M], suite_model: type[_M]
) -> Any:
    records = _parse_jsonl(lines, path, item)
    line_numbers = [line_no for line_no, _ in records]
    suite = suite_model.model_validate({"queries": [record for _, record in records]})
    assert isinstance(suite, RetrievalSuite | GenerationSuite)

    def line_of(loc: Loc) -> int | None:
        if len(loc) >= 2 and loc[0] == "queries" and isinstance(loc[1], int):
            return line_numbers[loc[1]]
        return None

    def field_of(loc: Loc) -> str | None:
        # inside a JSONL record the field is relative to its line
        return field_path(loc[2:]) or None

    _check_suite(suite, path, line_of, field_of)
    return suite


# --------------------------------------------------------------------------- public parsers


def parse_retrieval_yaml(text: str, *, path: str = "<retrieval suite>") -> RetrievalSuite:
    return _parse_document(text, path, RetrievalSuite)


def parse_generation_yaml(text: str, *, path: str = "<generation suite>") -> GenerationSuite:
    return _parse_document(text, path, GenerationSuite)


def parse_retrieval_jsonl(
    lines: Iterable[str], *, path: str = "<retrieval suite>"
) -> RetrievalSuite:
    suite: RetrievalSuite = _suite_from_jsonl(lines, path, RetrievalQuery, RetrievalSuite)
    return suite


def parse_generation_jsonl(
    lines: Iterable[str], *, path: str = "<generation suite>"
) -> GenerationSuite:
    suite: GenerationSuite = _suite_from_jsonl(lines, path, GenerationCase, GenerationSuite)
    return suite


def _format_of(path: Path) -> Literal["yaml", "json", "jsonl"]:
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "yaml"
    if suffix == ".json":
        return "json"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    raise GoldenDataError(
        f"unknown suite format {suffix or '(no suffix)'!r}: use .yaml, .yml, .json or .jsonl",
        path=str(path),
        line=None,
        field=None,
    )


def load_retrieval_suite(path: str | Path) -> RetrievalSuite:
    """Read a retrieval suite from ``.yaml``/``.yml``, ``.json`` or ``.jsonl``."""
    file_path = Path(path)
    kind = _format_of(file_path)
    text = read_text(file_path)
    if kind == "jsonl":
        return parse_retrieval_jsonl(text.splitlines(), path=str(file_path))
    return _parse_document(text, str(file_path), RetrievalSuite, json_only=kind == "json")


def load_generation_suite(path: str | Path) -> GenerationSuite:
    """Read a generation suite from ``.yaml``/``.yml``, ``.json`` or ``.jsonl``."""
    file_path = Path(path)
    kind = _format_of(file_path)
    text = read_text(file_path)
    if kind == "jsonl":
        return parse_generation_jsonl(text.splitlines(), path=str(file_path))
    return _parse_document(text, str(file_path), GenerationSuite, json_only=kind == "json")


def load_suite(path: str | Path, kind: SuiteKind) -> Suite:
    if kind == "retrieval":
        return load_retrieval_suite(path)
    return load_generation_suite(path)


_GENERATION_KEYS = frozenset({"question", "reference", "expected_topics", "no_context"})
_RETRIEVAL_KEYS = frozenset({"query", "expected_docs"})


def detect_kind(path: str | Path) -> SuiteKind:
    """Whether a suite file holds retrieval queries or generation cases, from the keys of its
    first query (``question``, ``reference``, ... are generation; ``query``,
    ``expected_docs`` retrieval). A file that says neither is read as retrieval, whose
    validation then names what is missing."""
    file_path = Path(path)
    fmt = _format_of(file_path)
    text = read_text(file_path)
    first: Any = None
    try:
        if fmt == "jsonl":
            line = next((x for x in text.splitlines() if x.strip()), "")
            first = json.loads(line) if line else None
        else:
            data = json.loads(text) if fmt == "json" else yaml.safe_load(text)
            queries = data.get("queries") if isinstance(data, dict) else data
            first = queries[0] if isinstance(queries, list) and queries else None
    except (ValueError, yaml.YAMLError):
        return "retrieval"  # unparseable: the loader reports where
    keys = set(first) if isinstance(first, dict) else set()
    if keys & _GENERATION_KEYS and not keys & _RETRIEVAL_KEYS:
        return "generation"
    return "retrieval"


# --------------------------------------------------------------------------- labels


class _Label(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, coerce_numbers_to_str=True)

    query_id: str = Field(min_length=1)
    doc_id: str = Field(min_length=1)
    grade: StrictInt


Labels = dict[tuple[str, str], int]


def parse_labels_jsonl(lines: Iterable[str], *, path: str = "<labels>") -> Labels:
    """JSONL ``{"query_id", "doc_id", "grade"}`` (other keys ignored) -> {(qid, doc): grade}."""
    labels: Labels = {}
    first_line: dict[tuple[str, str], int] = {}
    for line_no, record in _parse_jsonl(lines, path, _Label):
        key = (record.query_id, record.doc_id)
        if key in labels:
            raise GoldenDataError(
                f"document {record.doc_id!r} labelled twice for query {record.query_id!r} "
                f"(first on line {first_line[key]})",
                path=path,
                line=line_no,
                field="doc_id",
            )
        first_line[key] = line_no
        labels[key] = record.grade
    return labels


def load_labels(path: str | Path) -> Labels:
    """One annotator's labels: JSONL (``.jsonl``), a retrieval suite (``.yaml``/``.yml``) or
    TREC qrels (anything else) -> {(query_id, doc_id): grade}."""
    file_path = Path(path)
    suffix = file_path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return parse_labels_jsonl(read_text(file_path).splitlines(), path=str(file_path))
    if suffix in (".yaml", ".yml"):
        qrels = load_retrieval_suite(file_path).qrels()
    else:
        qrels = load_qrels(file_path)
    return {(qid, doc): grade for qid, docs in qrels.items() for doc, grade in docs.items()}


def group_label(value: str | None) -> str:
    return value if value else UNLABELLED


__all__ = [
    "UNLABELLED",
    "DatasetInfo",
    "ExpectedDoc",
    "GenerationCase",
    "GenerationSuite",
    "GoldenDataError",
    "Labels",
    "QueryMetadata",
    "RetrievalQuery",
    "RetrievalSuite",
    "Suite",
    "SuiteKind",
    "field_path",
    "group_label",
    "load_generation_suite",
    "load_labels",
    "load_retrieval_suite",
    "load_suite",
    "parse_generation_jsonl",
    "parse_generation_yaml",
    "parse_labels_jsonl",
    "parse_retrieval_jsonl",
    "parse_retrieval_yaml",
]
