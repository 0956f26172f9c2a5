"""What does a judged trace cost: the LLM judge versus the ragas adapter?

    python bench/judge_cost.py [--strictness 3] [--json OUT]
    python bench/judge_cost.py --reference [--json OUT]

Scores the same 20 traces (10 English, 10 Japanese, written below) with
:class:`monitor.evaluators.llm.LLMJudge` and with
:class:`monitor.evaluators.ragas_adapter.RagasEvaluator` restricted to the three reference-free
metrics they share -- faithfulness, answer relevancy, context precision -- and counts, *at the
scripted OpenAI-compatible server* (the real openai clients talk to it over HTTP on loopback),
per judged trace: chat-completion calls and the prompt + completion tokens the server reported.
The server reports usage the same way for both (``len(all message contents) // 4 + 1`` prompt
tokens, ``len(reply) // 4 + 1`` completion tokens; embeddings: ``len(inputs) // 4 + 1``), so
the comparison is like for like; Japanese is undercounted by that rule (about one token per
character in practice) for both evaluators alike.

The server counts message contents only, not a ``response_format`` json_schema, which real
endpoints bill as prompt tokens too: the judge sends its schema there, ragas (instructor JSON
mode) inside the messages. The ``+schema`` column and ratio add ``len(response_format) // 4``
to the prompt tokens of every call, the conservative comparison for the judge.

The LLM judge's figures cover its fourth metric (context relevancy) too: it comes out of the same
two calls. ragas's embedding requests (answer relevancy) are counted apart and not in the chat
totals. The judge's cache is off, so every trace is a miss.

Target (issue 3): at most 2 chat calls per judged trace, and at most a quarter of ragas's tokens.

``--reference`` compares the golden-set answer judges instead (``LLMAnswerJudge`` versus
``RagasAnswerJudge`` of :mod:`monitor.golden.judges`):
answer correctness, semantic similarity and context recall against a reference answer (here:
each trace's first context, a reference of realistic length) plus the reference-free
faithfulness, answer relevancy and (LLM judge only; ragas 0.4 has none, counted unmeasured)
context relevancy, per golden case. No target is set for these; the figures say what a
scheduled generation suite costs per case.
Needs the ``ragas`` extra (``pip install 'rag-monitor[ragas]'``) and the test support code.

``--server llama-server`` or ``--server llama_cpp.server`` measures the LLM judge against a
real model server instead (``scripts/setup-llama.sh`` builds both; Gemma 3 270M), started as a
user starts it, with its defaults (llama-server: the model's context, every core, 4 slots;
llama_cpp.server: 2048 tokens of context, one request at a time), and the judge with its own
defaults (adaptive concurrency up to ``--max-concurrency``, default 4; deadlines from size),
judging up to that many traces at once as ``rag-monitor score`` does. Per judged trace: the
chat calls (refused ones included), prompt and completion tokens as the server reported them,
the seconds the evaluation took (waiting for room under the limit included), and how many
replies were cut at the bound; then the wall time, traces per minute, the concurrency the
client settled on (and its value after each trace) and the server's pace as the judge learnt
it. ``--max-tokens N`` sets ``judge.max_tokens`` (default: the judge's per-task bound sized from
the schema); ``--traces N`` judges the first N/2 English and N/2 Japanese traces (default 4).
The tiny model's verdicts mean nothing; the figures say what pacing does on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prometheus_client import CollectorRegistry  # noqa: E402

from monitor.config.judge import JudgeConfig  # noqa: E402
from monitor.evaluators.judge_metrics import JudgeMetrics  # noqa: E402
from monitor.evaluators.llm import LLMJudge  # noqa: E402
from monitor.models import Context, EvaluationResult, Trace  # noqa: E402
from tests.support.openai_server import OpenAIServer, Received  # noqa: E402

SHARED = ("faithfulness", "answer_relevancy", "context_precision")

# (question, contexts, answer)
EN: list[tuple[str, list[str], str]] = [
    (
        "How long do I have to return an unopened item?",
        [
            "Unopened items can be returned within 30 days of delivery for a full refund. "
            "Return shipping is free for members.",
            "Opened electronics may be returned within 14 days and are subject to a 15% "
            "restocking fee.",
            "Gift cards are not refundable.",
        ],
        "You can return an unopened item within 30 days of delivery for a full refund. "
        "Members also get free return shipping.",
    ),
    (
        "Can I change the delivery address after ordering?",
        [
            "The delivery address can be changed from the order page until the parcel is "
            "handed to the carrier.",
            "Once shipped, contact the carrier directly with your tracking number.",
        ],
        "Yes. You can change it on the order page until the parcel is handed to the carrier. "
        "After shipping, contact the carrier with your tracking number.",
    ),
    (
        "What is the maximum upload size for attachments?",
        [
            "Attachments up to 25 MB are accepted on the free plan and up to 250 MB on the "
            "business plan.",
            "Supported formats include PDF, PNG, JPEG and DOCX.",
            "Files are scanned for malware before they are stored.",
        ],
        "The limit is 25 MB on the free plan and 250 MB on the business plan.",
    ),
    (
        "How do I reset my password?",
        [
            "To reset your password, choose 'Forgot password' on the sign-in page and follow "
            "the link sent to your e-mail address. The link expires after 60 minutes.",
            "Two-factor authentication can be enabled under Security settings.",
        ],
        "Click 'Forgot password' on the sign-in page and open the link we e-mail you. "
        "The link is valid for 60 minutes. You will also need to re-enable two-factor "
        "authentication afterwards.",
    ),
    (
        "Does the premium plan include phone support?",
        [
            "Premium subscribers get 24/7 chat support and phone support on weekdays from "
            "9:00 to 18:00.",
            "The basic plan includes e-mail support with a response within two business days.",
        ],
        "Yes, premium includes phone support on weekdays from 9:00 to 18:00, plus 24/7 chat.",
    ),
    (
        "Which regions is the service available in?",
        [
            "The service is available in the EU, the United States, Canada and Japan.",
            "Data for EU customers is stored in Frankfurt.",
            "Expansion to Australia is planned but no date has been announced.",
        ],
        "It is available in the EU, the United States, Canada and Japan. EU data is stored in "
        "Frankfurt.",
    ),
    (
        "How are late payments handled?",
        [
            "Invoices are due 30 days after issue. A reminder is sent 7 days after the due date.",
            "Accounts with invoices overdue by more than 45 days are suspended until payment.",
        ],
        "Invoices are due within 30 days; you get a reminder a week after the due date, and "
        "accounts more than 45 days overdue are suspended.",
    ),
    (
        "Can I use the API on the free tier?",
        [
            "The API is available on all plans. The free tier is limited to 1,000 requests per "
            "day.",
            "Rate limits reset at midnight UTC.",
        ],
        "Yes, with a limit of 1,000 requests per day, reset at midnight UTC.",
    ),
    (
        "What happens to my data when I cancel?",
        [
            "After cancellation, workspace data is kept for 90 days and can be exported during "
            "that time.",
            "After 90 days, data is permanently deleted, including backups within a further "
            "30 days.",
        ],
        "Your data stays available for export for 90 days, then it is permanently deleted. "
        "Backups are erased within another 30 days.",
    ),
    (
        "Is there a student discount?",
        [
            "Students with a valid university e-mail address get 50% off the personal plan.",
            "The discount is renewed each year on verification.",
            "Team plans are not eligible for discounts.",
        ],
        "Yes, students get 50% off the personal plan with a university e-mail address, "
        "renewed yearly.",
    ),
]

JA: list[tuple[str, list[str], str]] = [
    (
        "未開封の商品はいつまで返品できますか？",
        [
            "未開封の商品は、お届けから30日以内であれば全額返金で返品できます。"
            "会員の方は返送料が無料です。",
            "開封済みの電子機器は14日以内に限り返品でき、15%の再入荷手数料がかかります。",
            "ギフトカードは返金できません。",
        ],
        "未開封の商品はお届けから30日以内なら全額返金で返品できます。会員は返送料も無料です。",
    ),
    (
        "注文後に配送先を変更できますか？",
        [
            "配送先は、荷物が配送業者に引き渡されるまで注文ページから変更できます。",
            "発送後は、追跡番号を添えて配送業者に直接お問い合わせください。",
        ],
        "はい。配送業者に引き渡されるまでは注文ページで変更できます。"
        "発送後は追跡番号を添えて配送業者にご連絡ください。",
    ),
    (
        "添付ファイルの最大サイズはいくつですか？",
        [
            "添付ファイルは無料プランで25MBまで、ビジネスプランで250MBまでです。",
            "対応形式はPDF、PNG、JPEG、DOCXです。",
            "ファイルは保存前にマルウェア検査が行われます。",
        ],
        "無料プランは25MBまで、ビジネスプランは250MBまでです。",
    ),
    (
        "パスワードを再設定するにはどうすればよいですか？",
        [
            "サインイン画面で「パスワードをお忘れですか」を選び、メールで届くリンクから再設定して"
            "ください。リンクの有効期限は60分です。",
            "二要素認証はセキュリティ設定から有効にできます。",
        ],
        "サインイン画面の「パスワードをお忘れですか」から、メールのリンクで再設定できます。"
        "リンクは60分間有効です。再設定後は二要素認証の再登録も必要です。",
    ),
    (
        "プレミアムプランに電話サポートは含まれますか？",
        [
            "プレミアム会員は24時間チャットサポートと、平日9時から18時の電話サポートを"
            "利用できます。",
            "ベーシックプランはメールサポートのみで、2営業日以内に回答します。",
        ],
        "はい、平日9時から18時の電話サポートと24時間のチャットサポートが含まれます。",
    ),
    (
        "サービスはどの地域で利用できますか？",
        [
            "本サービスはEU、米国、カナダ、日本で利用できます。",
            "EUのお客様のデータはフランクフルトに保存されます。",
            "オーストラリアへの展開を予定していますが、時期は未定です。",
        ],
        "EU、米国、カナダ、日本で利用できます。EUのデータはフランクフルトに保存されます。",
    ),
    (
        "支払いが遅れた場合はどうなりますか？",
        [
            "請求書の支払期限は発行から30日です。期限の7日後に督促メールが送られます。",
            "45日を超えて未払いのアカウントは、支払いまで停止されます。",
        ],
        "支払期限は30日で、期限の1週間後に督促が届きます。"
        "45日を超えて未払いの場合はアカウントが停止されます。",
    ),
    (
        "無料プランでAPIは使えますか？",
        [
            "APIはすべてのプランで利用できます。無料プランは1日1,000リクエストまでです。",
            "レート制限は協定世界時の0時にリセットされます。",
        ],
        "はい、1日1,000リクエストまで使えます。制限は協定世界時の0時にリセットされます。",
    ),
    (
        "解約するとデータはどうなりますか？",
        [
            "解約後、ワークスペースのデータは90日間保持され、その間はエクスポートできます。",
            "90日を過ぎるとデータは完全に削除され、バックアップもさらに30日以内に削除されます。",
        ],
        "データは90日間エクスポートでき、その後完全に削除されます。"
        "バックアップも30日以内に消去されます。",
    ),
    (
        "学割はありますか？",
        [
            "大学のメールアドレスをお持ちの学生は、個人プランが50%割引になります。",
            "割引は毎年の確認で更新されます。",
            "チームプランは割引の対象外です。",
        ],
        "はい、大学のメールアドレスがあれば個人プランが50%割引になり、毎年更新されます。",
    ),
]


def build_traces() -> list[Trace]:
    out: list[Trace] = []
    for lang, rows in (("en", EN), ("ja", JA)):
        for i, (question, contexts, answer) in enumerate(rows, 1):
            tid = f"{lang}-{i:02d}"
            out.append(
                Trace(
                    trace_id=tid,
                    timestamp=datetime(2025, 5, 1, 12, 0, tzinfo=UTC),
                    agent="support-bot",
                    conversation_id=f"conv-{tid}",
                    turn=1,
                    query=question,
                    contexts=[
                        Context(id=f"{tid}-c{k}", text=t, rank=k) for k, t in enumerate(contexts)
                    ],
                    answer=answer,
                    language=lang,
                )
            )
    return out


@dataclass
class Cost:
    """What one evaluator spent on one trace, counted at the server."""

    chat_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embedding_calls: int = 0
    embedding_tokens: int = 0
    schema_tokens: int = 0  # response_format json_schema, not in the server's usage
    unmeasured: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def tokens_with_schema(self) -> int:
        return self.tokens + self.schema_tokens


def count(requests: list[Received], result: EvaluationResult | None) -> Cost:
    cost = Cost()
    for r in requests:
        usage = r.usage or {}
        if r.embedding:
            cost.embedding_calls += 1
            cost.embedding_tokens += usage.get("prompt_tokens", 0)
        else:
            cost.chat_calls += 1
            cost.prompt_tokens += usage.get("prompt_tokens", 0)
            cost.completion_tokens += usage.get("completion_tokens", 0)
            rf = r.body.get("response_format")
            if isinstance(rf, dict) and rf.get("type") == "json_schema":
                cost.schema_tokens += len(json.dumps(rf, ensure_ascii=False)) // 4
    if result is not None:
        cost.unmeasured = [
            f"{m}:{result.scores[m].reason}" for m in SHARED if not result.scores[m].measured
        ]
    return cost


async def run(strictness: int) -> dict[str, dict[str, list[Cost]]]:
    from monitor.evaluators.ragas_adapter import RagasEvaluator
    from tests.support.ragas_script import RagasScript

    traces = build_traces()
    costs: dict[str, dict[str, list[Cost]]] = {"llm": {}, "ragas": {}}
    async with OpenAIServer(script=RagasScript()) as server:
        config = JudgeConfig(
            base_url=server.url,
            model="judge-test",
            timeout_seconds=30.0,
            max_retries=1,
            cache_ttl_seconds=0,  # every trace judged, no cache hits
        )
        judge = LLMJudge(config, JudgeMetrics(CollectorRegistry()))
        ragas = RagasEvaluator(
            config,
            JudgeMetrics(CollectorRegistry()),
            embedding_model="text-embedding-3-small",
            enabled=SHARED,
            answer_relevancy_strictness=strictness,
        )
        evaluators: list[tuple[str, Any]] = [("llm", judge), ("ragas", ragas)]
        try:
            for name, evaluator in evaluators:
                for t in traces:
                    server.reset()
                    result = await evaluator.evaluate(t)
                    lang = t.language or "en"
                    costs[name].setdefault(lang, []).append(count(list(server.requests), result))
        finally:
            await judge.aclose()
            await ragas.aclose()
    return costs


async def run_reference() -> dict[str, dict[str, list[Cost]]]:
    from monitor.golden.dataset import GenerationCase
    from monitor.golden.judges import LLMAnswerJudge, RagasAnswerJudge
    from tests.support.ragas_script import RagasScript

    costs: dict[str, dict[str, list[Cost]]] = {"llm": {}, "ragas": {}}
    async with OpenAIServer(script=RagasScript()) as server:
        config = JudgeConfig(
            base_url=server.url, model="judge-test", timeout_seconds=30.0, max_retries=1
        )
        judges: list[tuple[str, Any]] = [
            ("llm", LLMAnswerJudge(config, JudgeMetrics(CollectorRegistry()))),
            ("ragas", RagasAnswerJudge.from_config(config, JudgeMetrics(CollectorRegistry()))),
        ]
        try:
            for name, judge in judges:
                for t in build_traces():
                    case = GenerationCase(
                        id=t.trace_id,
                        question=t.query,
                        language=t.language,
                        reference=t.contexts[0].text,
                    )
                    server.reset()
                    scores = await judge.judge(case, t.answer, [c.text for c in t.contexts])
                    cost = count(list(server.requests), None)
                    cost.unmeasured = [f"{k}:{v}" for k, v in scores.unmeasured.items()]
                    costs[name].setdefault(t.language or "en", []).append(cost)
        finally:
            for _, judge in judges:
                await judge.aclose()
    return costs


def _mean(values: list[int]) -> float:
    return statistics.fmean(values) if values else 0.0


def summarise(costs: dict[str, dict[str, list[Cost]]]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name, by_lang in costs.items():
        groups = {**by_lang, "all": [c for cs in by_lang.values() for c in cs]}
        for lang, cs in groups.items():
            rows[f"{name}/{lang}"] = {
                "traces": len(cs),
                "chat_calls": _mean([c.chat_calls for c in cs]),
                "max_chat_calls": max((c.chat_calls for c in cs), default=0),
                "prompt_tokens": _mean([c.prompt_tokens for c in cs]),
                "completion_tokens": _mean([c.completion_tokens for c in cs]),
                "tokens": _mean([c.tokens for c in cs]),
                "tokens_with_schema": _mean([c.tokens_with_schema for c in cs]),
                "embedding_calls": _mean([c.embedding_calls for c in cs]),
                "embedding_tokens": _mean([c.embedding_tokens for c in cs]),
                "unmeasured": sum(len(c.unmeasured) for c in cs),
            }
    return rows


def print_table(rows: dict[str, Any], reference: bool = False) -> dict[str, Any]:
    header = (
        f"{'evaluator/lang':<14} {'traces':>6} {'calls':>6} {'max':>4} {'prompt':>8} "
        f"{'compl.':>7} {'total':>8} {'+schema':>8} {'emb.calls':>9} {'emb.tok':>8} {'unmeas.':>7}"
    )
    unit = "golden case" if reference else "judged trace"
    print(f"per {unit} (means), counted at the scripted server")
    print(header)
    print("-" * len(header))
    for key, r in rows.items():
        print(
            f"{key:<14} {r['traces']:>6} {r['chat_calls']:>6.2f} {r['max_chat_calls']:>4} "
            f"{r['prompt_tokens']:>8.1f} {r['completion_tokens']:>7.1f} {r['tokens']:>8.1f} "
            f"{r['tokens_with_schema']:>8.1f} "
            f"{r['embedding_calls']:>9.2f} {r['embedding_tokens']:>8.1f} {r['unmeasured']:>7}"
        )
    print()
    ratios: dict[str, Any] = {}
    for lang in ("en", "ja", "all"):
        llm, rg = rows.get(f"llm/{lang}"), rows.get(f"ragas/{lang}")
        if not llm or not rg:
            continue
        ratios[lang] = {
            "calls": llm["chat_calls"] / rg["chat_calls"] if rg["chat_calls"] else None,
            "tokens": llm["tokens"] / rg["tokens"] if rg["tokens"] else None,
            "tokens_with_schema": llm["tokens_with_schema"] / rg["tokens_with_schema"]
            if rg["tokens_with_schema"]
            else None,
            "prompt_tokens": llm["prompt_tokens"] / rg["prompt_tokens"]
            if rg["prompt_tokens"]
            else None,
        }
        r = ratios[lang]
        print(
            f"LLM judge / ragas [{lang}]: calls {r['calls']:.3f}, tokens {r['tokens']:.3f} "
            f"(prompt {r['prompt_tokens']:.3f}; +schema {r['tokens_with_schema']:.3f})"
        )
    llm_all, ratio_all = rows["llm/all"], ratios["all"]
    if reference:
        return {"rows": rows, "ratios": ratios}
    calls_ok = llm_all["max_chat_calls"] <= 2
    worst = max(ratio_all["tokens"] or 0.0, ratio_all["tokens_with_schema"] or 0.0)
    tokens_ok = ratio_all["tokens"] is not None and worst <= 0.25
    print()
    print(
        f"target: LLM judge <= 2 calls per trace: {'met' if calls_ok else 'MISSED'} "
        f"(max {llm_all['max_chat_calls']}); <= 1/4 of ragas's tokens: "
        f"{'met' if tokens_ok else 'MISSED'} ({ratio_all['tokens']:.3f}; "
        f"{ratio_all['tokens_with_schema']:.3f} with the judge's schema counted)"
    )
    return {
        "rows": rows,
        "ratios": ratios,
        "calls_target_met": calls_ok,
        "tokens_target_met": tokens_ok,
    }


def _user_text(request: dict[str, Any]) -> str:
    messages = request.get("messages") or []
    return " ".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))


async def run_server(
    kind: str, max_tokens: int | None, n_traces: int, max_concurrency: int
) -> dict[str, Any]:
    import tempfile
    import time

    from monitor.evaluators.judge_prompts import dump_data
    from monitor.logs import configure_logging
    from tests.support.llama_servers import MODEL_ALIAS, ModelServer, RecordingProxy, installed

    configure_logging("console", "warning")  # the table on stdout, warnings on stderr
    found = installed()
    if found is None:
        raise SystemExit("bench: no model servers; run scripts/setup-llama.sh first")
    all_traces = build_traces()
    half = max(1, n_traces // 2)
    chosen = [t for t in all_traces if t.language == "en"][:half]
    chosen += [t for t in all_traces if t.language == "ja"][: n_traces - len(chosen)]
    rows: list[dict[str, Any]] = []
    limits: list[int] = []
    with tempfile.TemporaryDirectory() as logs:
        server = ModelServer(kind, found, defaults=True)  # type: ignore[arg-type]
        with server.start(Path(logs)), RecordingProxy(server.url) as proxy:
            config = JudgeConfig(
                base_url=proxy.url,
                model=MODEL_ALIAS,
                max_tokens=max_tokens,
                max_concurrency=max_concurrency,
                cache_ttl_seconds=0,
            )
            judge = LLMJudge(config, JudgeMetrics(CollectorRegistry()))
            room = asyncio.Semaphore(max_concurrency)  # traces in flight, as `score` runs them

            async def judged(t: Trace) -> None:
                async with room:
                    started = time.monotonic()
                    result = await judge.evaluate(t)
                    seconds = time.monotonic() - started
                limits.append(judge.client.concurrency_limit.limit)
                marker = dump_data(t.query.strip())[1:-1]  # the question as the prompt shows it
                chat = [e for e in proxy.chat() if marker in _user_text(e.request)]
                rows.append(
                    {
                        "trace": t.trace_id,
                        "calls": len(chat),
                        "refused": sum(1 for e in chat if e.status != 200),
                        "prompt_tokens": sum(e.usage("prompt_tokens") for e in chat),
                        "completion_tokens": sum(e.usage("completion_tokens") for e in chat),
                        "bounds": sorted({e.max_tokens or 0 for e in chat}),
                        "cut_at_bound": sum(1 for e in chat if e.finish_reason == "length"),
                        "seconds": seconds,
                        "measured": sum(1 for sc in result.scores.values() if sc.measured),
                        "unmeasured": sorted(
                            {sc.reason or "" for sc in result.scores.values() if not sc.measured}
                        ),
                    }
                )

            wall = time.monotonic()
            try:
                await asyncio.gather(*(judged(t) for t in chosen))
            finally:
                await judge.aclose()
            wall = time.monotonic() - wall
            speeds = judge.client.pace.tokens_per_second()
            settled = judge.client.concurrency_limit.limit
    bound = f"max_tokens {max_tokens}" if max_tokens else "max_tokens per task (schema-sized)"
    print(
        f"per judged trace against {kind} (Gemma 3 270M, started with its defaults), {bound}, "
        f"up to {max_concurrency} traces at once"
    )
    header = (
        f"{'trace':<7} {'calls':>5} {'refused':>7} {'prompt':>7} {'compl.':>7} {'cut':>4} "
        f"{'seconds':>8} {'measured':>8}  bounds / unmeasured"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['trace']:<7} {r['calls']:>5} {r['refused']:>7} {r['prompt_tokens']:>7} "
            f"{r['completion_tokens']:>7} {r['cut_at_bound']:>4} {r['seconds']:>8.1f} "
            f"{r['measured']:>8}  {r['bounds']} {r['unmeasured']}"
        )
    summary = {
        key: statistics.fmean(r[key] for r in rows)
        for key in ("calls", "refused", "prompt_tokens", "completion_tokens", "seconds")
    }
    print(
        f"mean: {summary['calls']:.2f} calls ({summary['refused']:.2f} refused), "
        f"{summary['prompt_tokens']:.0f} prompt + {summary['completion_tokens']:.0f} completion "
        f"tokens, {summary['seconds']:.1f} s per judged trace (waiting for room included)"
    )
    print(
        f"wall: {wall:.0f} s for {len(rows)} traces ({len(rows) / wall * 60:.2f} traces/min); "
        f"concurrency settled at {settled} (after each trace: {limits})"
    )
    if speeds is not None:
        print(
            f"server pace per request, as the judge learnt it: {speeds[0]:.0f} prompt tokens/s, "
            f"{speeds[1]:.1f} generated tokens/s"
        )
    return {
        "server": kind,
        "max_tokens": max_tokens,
        "max_concurrency": max_concurrency,
        "rows": rows,
        "mean": summary,
        "wall_seconds": wall,
        "concurrency_settled": settled,
        "concurrency_after_each_trace": limits,
        "tokens_per_second": speeds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--server",
        choices=("llama-server", "llama_cpp.server"),
        help="measure the LLM judge against this real model server instead",
    )
    parser.add_argument("--max-tokens", type=int, help="judge.max_tokens for --server")
    parser.add_argument("--traces", type=int, default=4, help="traces judged with --server")
    parser.add_argument(
        "--max-concurrency", type=int, default=4, help="judge.max_concurrency for --server"
    )
    parser.add_argument(
        "--strictness", type=int, default=3, help="ragas AnswerRelevancy questions (default 3)"
    )
    parser.add_argument(
        "--reference", action="store_true", help="the golden-set answer judges instead"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.server:
        report = asyncio.run(
            run_server(args.server, args.max_tokens, args.traces, args.max_concurrency)
        )
    elif args.reference:
        report = print_table(summarise(asyncio.run(run_reference())), reference=True)
    else:
        report = print_table(summarise(asyncio.run(run(args.strictness))))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
