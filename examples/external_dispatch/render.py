"""The handler and the reconciler's poll for jobs whose work runs on a
render farm (here ``fake_service.FakeService``): the handler starts the
work under the fence with ``ctx.dispatch`` and leaves the job running
there; the reconciler asks the farm how the work is doing once the job's
lease lapses, and completes, fails or re-runs the job from the answer."""

from __future__ import annotations

import fenceq
from fake_service import FakeService, Refused

BACKEND = "render-farm"  # the external system's name in fenceq's dispatch records


def render_app(service: FakeService, queue: str = "renders") -> fenceq.App:
    app = fenceq.App(queues=[queue])

    @app.task("render")
    def render(ctx: fenceq.JobContext) -> fenceq.Dispatched:
        def start(reservation_ref: str) -> str:
            try:
                return service.start(reservation_ref, ctx.payload)
            except Refused:
                raise  # nothing started: ctx.dispatch releases the reservation and the job retries
            except TimeoutError:
                # It may have started: never raise here. The farm knows its
                # work by the key too, so the key serves as its ref.
                return reservation_ref

        return fenceq.Dispatched(ctx.dispatch(BACKEND, start))

    return app


def poll_for(service: FakeService):
    """``poll(ref)``: what the farm says about a key or a work id."""

    def poll(ref: str) -> fenceq.PollResult:
        work = service.find(ref)
        if work is None:
            return fenceq.PollResult.unknown()
        if work.state == "done":
            return fenceq.PollResult.done(work.result, execution_ref=work.work_id)
        if work.state in ("failed", "cancelled"):
            return fenceq.PollResult.failed(work.error or work.state, execution_ref=work.work_id)
        return fenceq.PollResult.running(execution_ref=work.work_id)

    return poll


def reconciler_for(service: FakeService, client: str | fenceq.AsyncClient, **options) -> fenceq.Reconciler:
    return fenceq.Reconciler(client, BACKEND, poll_for(service), cancel=service.cancel, **options)
