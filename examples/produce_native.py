"""Send one RAG turn to rag-monitor as a native JSON trace (docs/input.md).

.venv/bin/python examples/produce_native.py [BOOTSTRAP] [TOPIC]
"""

import asyncio
import json
import sys
import uuid
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer


async def main(bootstrap: str = "localhost:9092", topic: str = "rag_traces") -> None:
    trace = {
        "trace_id": uuid.uuid4().hex,
        "timestamp": datetime.now(UTC).isoformat(),
        "agent": "support-bot",
        "conversation_id": "conv-42",
        "query": "How long is the warranty of the Aurora kettle?",
        "contexts": [{"id": "kb-7", "text": "The Aurora kettle has a two-year warranty."}],
        "answer": "It has a two-year warranty.",
    }
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:  # keyed by conversation, so one conversation's turns stay in order
        key = trace["conversation_id"].encode()
        await producer.send_and_wait(topic, json.dumps(trace).encode(), key=key)
    finally:
        await producer.stop()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
