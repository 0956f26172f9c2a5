"""What the OpenLLMetry (traceloop-sdk) test apps share: starting the SDK.

`Traceloop.init` instruments a framework only when it finds the framework's meta-package
(`langchain`, `llama-index`) installed; the apps need only the framework's core package, so
they instrument it themselves when the SDK did not, as OpenLLMetry's docs show for the
standalone instrumentation packages.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from traceloop.sdk import Traceloop


def init_traceloop(plan: dict[str, Any], *frameworks: BaseInstrumentor) -> None:
    """Export to the plan's Collector as the plan's service, with `frameworks` instrumented."""
    Traceloop.init(
        app_name=plan["service"],
        api_endpoint=plan["otlp_endpoint"],
        telemetry_enabled=False,
    )
    for instrumentor in frameworks:
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument()
