"""TREC qrels and run files.

qrels: one judgment a line, ``qid iteration docid grade`` (the iteration column, usually 0, is
ignored, as trec_eval ignores it); the grade is an integer and may be negative (trec_eval:
"in the pool but unjudged", never relevant, no gain).

run: one retrieved document a line, ``qid Q0 docid rank score tag`` (the ``Q0`` column is
ignored; the rank must be an integer and the score a finite number, but see ``tie_break`` for
how each is used).

Fields are separated by runs of ASCII whitespace (space, tab, ...; as C's ``isspace`` in
trec_eval -- an ideographic space U+3000 inside a Japanese id is *not* a separator); lines end
at a line feed (a trailing carriage return is dropped) and blank lines are skipped. A line with
the wrong number of fields, an unparsable value, or a document that appears twice for the same
query (in either file; trec_eval refuses both) raises :class:`GoldenDataError`, naming the
file, the line and the field.

Turning a run into rankings (``tie_break``):

- ``"trec_eval"``: what trec_eval does -- the rank column is ignored, documents are sorted by
  score descending, and equal scores are ordered by document id *descending* (C ``strcmp``
  order, i.e. byte order of the UTF-8 text, which equals Python's code-point order on ``str``).
  With numeric document ids this is string order: ``"9" > "10"``.
- ``"stable"``: the order of the lines in the file, per query (the order in which the system
  returned the documents, e.g. JQaRA's stored runs); score and rank are not used.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

TieBreak = Literal["trec_eval", "stable"]

QRELS_FIELDS = ("qid", "iteration", "docid", "grade")
RUN_FIELDS = ("qid", "Q0", "docid", "rank", "score", "tag")

_ASCII_WHITESPACE = re.compile(r"[ \t\n\r\f\v]+")


class GoldenDataError(ValueError):
    """A malformed golden-data file; ``path``, ``line`` (1-based) and ``field`` locate it."""

    def __init__(self, message: str, *, path: str, line: int | None, field: str | None) -> None:
        self.path = path
        self.line = line
        self.field = field
        where = path if line is None else f"{path}:{line}"
        if field is not None:
            where += f" [{field}]"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class RunEntry:
    """One line of a run file."""

    qid: str
    docid: str
    rank: int
    score: float
    tag: str
    line: int


def read_text(path: Path) -> str:
    """The file as UTF-8 text; a missing file, a directory or other bytes are a
    :class:`GoldenDataError` naming the file."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GoldenDataError("file not found", path=str(path), line=None, field=None) from None
    except IsADirectoryError:
        raise GoldenDataError("is a directory", path=str(path), line=None, field=None) from None
    except UnicodeDecodeError as exc:
        raise GoldenDataError(
            f"not UTF-8 text ({exc.reason} at byte {exc.start})",
            path=str(path),
            line=None,
            field=None,
        ) from None


def _read_lines(path: Path) -> list[str]:
    lines = read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline does not start another line
    return lines


def _split(raw: str, expected: tuple[str, ...], path: str, line_no: int) -> list[str] | None:
    fields = [field for field in _ASCII_WHITESPACE.split(raw) if field]
    if not fields:
        return None
    if len(fields) != len(expected):
        # name the first missing field, or the first surplus one
        field = expected[len(fields)] if len(fields) < len(expected) else "extra"
        raise GoldenDataError(
            f"expected {len(expected)} fields ({' '.join(expected)}), got {len(fields)}",
            path=path,
            line=line_no,
            field=field,
        )
    return fields


def _parse_int(value: str, path: str, line_no: int, field: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise GoldenDataError(
            f"{field} must be an integer, got {value!r}", path=path, line=line_no, field=field
        ) from None


def parse_qrels(lines: Iterable[str], *, path: str = "<qrels>") -> dict[str, dict[str, int]]:
    """Parse qrels lines into qid -> {docid: grade}, queries and documents in file order."""
    qrels: dict[str, dict[str, int]] = {}
    first_seen: dict[tuple[str, str], int] = {}
    for line_no, raw in enumerate(lines, start=1):
        fields = _split(raw, QRELS_FIELDS, path, line_no)
        if fields is None:
            continue
        qid, _iteration, docid, grade_text = fields
        grade = _parse_int(grade_text, path, line_no, "grade")
        key = (qid, docid)
        if key in first_seen:
            raise GoldenDataError(
                f"document {docid!r} judged twice for query {qid!r} "
                f"(first on line {first_seen[key]})",
                path=path,
                line=line_no,
                field="docid",
            )
        first_seen[key] = line_no
        qrels.setdefault(qid, {})[docid] = grade
    return qrels


def parse_run(lines: Iterable[str], *, path: str = "<run>") -> list[RunEntry]:
    """Parse run lines into :class:`RunEntry` records, in file order."""
    entries: list[RunEntry] = []
    first_seen: dict[tuple[str, str], int] = {}
    for line_no, raw in enumerate(lines, start=1):
        fields = _split(raw, RUN_FIELDS, path, line_no)
        if fields is None:
            continue
        qid, _q0, docid, rank_text, score_text, tag = fields
        rank = _parse_int(rank_text, path, line_no, "rank")
        try:
            score = float(score_text)
        except ValueError:
            raise GoldenDataError(
                f"score must be a number, got {score_text!r}",
                path=path,
                line=line_no,
                field="score",
            ) from None
        if not math.isfinite(score):
            raise GoldenDataError(
                f"score must be finite, got {score_text!r}",
                path=path,
                line=line_no,
                field="score",
            )
        key = (qid, docid)
        if key in first_seen:
            raise GoldenDataError(
                f"document {docid!r} retrieved twice for query {qid!r} "
                f"(first on line {first_seen[key]})",
                path=path,
                line=line_no,
                field="docid",
            )
        first_seen[key] = line_no
        entries.append(
            RunEntry(qid=qid, docid=docid, rank=rank, score=score, tag=tag, line=line_no)
        )
    return entries


def rank_entries(
    entries: Sequence[RunEntry], *, tie_break: TieBreak = "trec_eval"
) -> dict[str, list[str]]:
    """Group run entries by query (first-appearance order) and order each query's documents.

    See the module docstring for the two ``tie_break`` conventions.
    """
    if tie_break not in ("trec_eval", "stable"):
        raise ValueError(f"tie_break must be 'trec_eval' or 'stable', got {tie_break!r}")
    by_query: dict[str, list[RunEntry]] = {}
    for entry in entries:
        by_query.setdefault(entry.qid, []).append(entry)
    ranked: dict[str, list[str]] = {}
    for qid, rows in by_query.items():
        if tie_break == "trec_eval":
            # Two stable sorts: doc id descending first, then score descending, so equal
            # scores keep the doc-id-descending order (trec_eval's comp_sim_docno).
            rows = sorted(rows, key=lambda e: e.docid, reverse=True)
            rows = sorted(rows, key=lambda e: e.score, reverse=True)
        ranked[qid] = [entry.docid for entry in rows]
    return ranked


def load_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read a TREC qrels file (UTF-8) into qid -> {docid: grade}."""
    file_path = Path(path)
    return parse_qrels(_read_lines(file_path), path=str(file_path))


def load_run_entries(path: str | Path) -> list[RunEntry]:
    """Read a TREC run file (UTF-8) into its entries, in file order."""
    file_path = Path(path)
    return parse_run(_read_lines(file_path), path=str(file_path))


def load_run(path: str | Path, *, tie_break: TieBreak = "trec_eval") -> dict[str, list[str]]:
    """Read a TREC run file into qid -> ranked document ids (see ``tie_break``)."""
    return rank_entries(load_run_entries(path), tie_break=tie_break)
