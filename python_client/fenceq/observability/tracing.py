"""An OpenTelemetry span around each handler run, when ``opentelemetry-api``
is installed; otherwise nothing (fenceq does not depend on it). Until the
application configures an SDK (a tracer provider and an exporter), the
API's spans are no-ops too. A span carries the job's queue, task, id,
attempt and generation; never its payload or its claim token. A handler
that raises marks its span as an error (the API records the exception)."""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager

try:
    from opentelemetry import trace
except ImportError:  # the optional dependency is absent: no spans
    trace = None  # type: ignore[assignment]

TRACER_NAME = "fenceq.worker"


def handler_span(claim: Any) -> ContextManager[Any]:
    """The span of one handler run for a claim (``types.Claim``)."""
    if trace is None:
        return contextlib.nullcontext()
    tracer = trace.get_tracer(TRACER_NAME)
    return tracer.start_as_current_span(
        f"fenceq {claim.task}", kind=trace.SpanKind.CONSUMER,
        attributes={"messaging.system": "fenceq", "messaging.destination.name": claim.queue,
                    "messaging.message.id": claim.job_id, "fenceq.task": claim.task,
                    "fenceq.attempt": claim.attempt, "fenceq.generation": claim.generation})
