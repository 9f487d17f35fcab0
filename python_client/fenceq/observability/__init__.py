"""What a running fenceq shows to its operators (docs/observability.md).

- ``metrics``: the worker's Prometheus metrics, counted from its structured
  events, and the per-queue figures of ``queue_stats``, read at most once
  per ``stats_interval`` however many scrapers come.
- ``endpoints``: the HTTP server a worker runs with ``metrics_port``:
  ``/metrics``, ``/healthz`` (the event loop answers, the database answered
  lately) and ``/readyz`` (schema checked, claiming).
- ``tracing``: an OpenTelemetry span around each handler run when
  ``opentelemetry-api`` is installed (a no-op otherwise, and a no-op span
  until an SDK is configured).
"""
