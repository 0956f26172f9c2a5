"""Where the development data (``data/`` at the repository root) lives for tests.

The data ships with the project (``data/README.md`` gives its sources and licences), so every
test that reads it runs on any clone; a missing file is a broken checkout and fails the test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DATA_DIR = Path(__file__).resolve().parents[2] / "data"


def dev_data_path(*parts: str) -> Path:
    """``data/<parts...>``; fails the test when the file is missing from the checkout."""
    path = DATA_DIR.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"development data missing from the checkout: {path}", pytrace=False)
    return path


def halueval_traces(count: int) -> list[dict[str, Any]]:
    """The first `count` HaluEval QA items of ``data/hallucination/dev_en.jsonl`` as native
    traces (trace id = the item's id, one context each, no conversation). They are short
    (about 500 characters): a judge prompt of one fits llama_cpp.server's default context of
    2048 tokens with room for the reply."""
    items = [
        json.loads(line)
        for line in dev_data_path("hallucination", "dev_en.jsonl").read_text("utf-8").splitlines()
    ]
    chosen = [i for i in items if i["dataset"].startswith("HaluEval") and i["question"]][:count]
    if len(chosen) < count:
        pytest.fail(f"dev_en.jsonl has {len(chosen)} HaluEval items, {count} wanted")
    return [
        {
            "schema_version": 1,
            "trace_id": item["id"],
            "timestamp": "2026-11-01T12:00:00+00:00",
            "agent": "default",
            "query": item["question"],
            "contexts": [
                {"id": f"{item['id']}-c{rank}", "text": text, "rank": rank}
                for rank, text in enumerate(item["contexts"], 1)
            ],
            "answer": item["answer"],
        }
        for item in chosen
    ]
