"""OpenTelemetry spans around handler runs, with the SDK configured (it is
a test dependency only: fenceq needs neither the API nor the SDK)."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fenceq.worker import App, NonRetryable, Worker
from conftest import async_wait_for, running

app = App(queues=["traced"])


@app.task("fine")
def fine(ctx):
    with trace.get_tracer("handler").start_as_current_span("inside"):  # the handler's own span
        return "ok"


@app.task("broken")
async def broken(ctx):
    raise NonRetryable("no")


@pytest.fixture(scope="module")
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # once per process: the API allows no second provider
    return exporter


async def test_each_handler_run_is_a_span_and_a_failure_marks_it(db, client, spans):
    spans.clear()
    client.create_queue("traced")
    fine_id = client.submit("traced", "fine", {"secret": "payload"})
    broken_id = client.submit("traced", "broken")
    worker = Worker(app, url=db.url, poll_interval=0.05)
    async with running(worker):
        await async_wait_for(lambda: client.get_job(broken_id).status == "failed"
                             and client.get_job(fine_id).status == "completed", what="both jobs to finish")
    finished = {span.name: span for span in spans.get_finished_spans()}
    run = finished["fenceq fine"]
    assert run.kind == trace.SpanKind.CONSUMER
    assert run.attributes["messaging.message.id"] == fine_id
    assert (run.attributes["fenceq.task"], run.attributes["fenceq.generation"]) == ("fine", 1)
    assert "payload" not in str(dict(run.attributes)) and run.status.is_ok
    assert finished["inside"].parent.span_id == run.context.span_id  # the thread sees its job's span
    failed = finished["fenceq broken"]
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert failed.events[0].name == "exception"
