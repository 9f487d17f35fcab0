"""An OpenTelemetry span around each handler run, when ``opentelemetry-api``
is installed; otherwise nothing (fenceq does not depend on it). Until the
application configures an SDK (a tracer provider and an exporter), fenceq
opens no span either (the API's would be a no-op). A span carries the
job's queue, task, id, attempt and generation; never its payload or its
claim token. A handler that raises marks its span as an error (the API
records the exception)."""

from __future__ import annotations

import contextlib
import time
from typing import Any, ContextManager

try:
    from opentelemetry import trace
except ImportError:  # the optional dependency is absent: no spans
    trace = None  # type: ignore[assignment]

TRACER_NAME = "fenceq.worker"

# The provider last seen and fenceq's tracer from it (a process sets its
# provider once: asking the SDK for a new tracer per job is waste).
_tracer_of: tuple[Any, Any] = (None, None)

# Asking the API for its provider reads the environment; while no provider
# is set, its "none" is taken as standing for this many seconds (one set by
# trace.set_tracer_provider is seen at once).
PROVIDER_RECHECK = 1.0
_no_sdk_until = float("-inf")  # monotonic


_NO_SPAN = contextlib.nullcontext()


def handler_span(claim: Any) -> ContextManager[Any]:
    """The span of one handler run for a claim (``types.Claim``)."""
    global _tracer_of, _no_sdk_until
    if trace is None:
        return _NO_SPAN
    provider = getattr(trace, "_TRACER_PROVIDER", None)
    if provider is None:
        if time.monotonic() < _no_sdk_until:
            return _NO_SPAN
        provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        # No SDK configured (yet): the API's span would be a no-op that
        # leaves the current span as it is; skip building it.
        _no_sdk_until = time.monotonic() + PROVIDER_RECHECK
        return _NO_SPAN
    if _tracer_of[0] is not provider:
        _tracer_of = (provider, provider.get_tracer(TRACER_NAME))
    return _tracer_of[1].start_as_current_span(
        f"fenceq {claim.task}", kind=trace.SpanKind.CONSUMER,
        attributes={"messaging.system": "fenceq", "messaging.destination.name": claim.queue,
                    "messaging.message.id": claim.job_id, "fenceq.task": claim.task,
                    "fenceq.attempt": claim.attempt, "fenceq.generation": claim.generation})
