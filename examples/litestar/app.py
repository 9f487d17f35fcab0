"""The Litestar example (README.md beside it): placing an order writes the
application's row and the job that renders its invoice in one request
transaction; the worker runs on the application's event loop; reading the
order shows the invoice once the job has run."""

from dataclasses import dataclass

from litestar import Litestar, get, post
from litestar.di import NamedDependency
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath, JSONBody

from examples.orders import PLACE_ORDER, READ_ORDER, render_invoice, tasks
from fenceq.client import AsyncTransaction
from fenceq.contrib.litestar import FenceqPlugin


@dataclass
class Order:
    number: str
    item: str
    quantity: int = 1


@post("/orders")
async def place_order(data: JSONBody[Order], fenceq_tx: NamedDependency[AsyncTransaction]) -> dict:
    job = await render_invoice.using(fenceq_tx).submit_async(number=data.number, item=data.item,
                                                             quantity=data.quantity)
    if not await fenceq_tx.execute(PLACE_ORDER, (data.number, data.item, data.quantity, job.id)):
        raise HTTPException(status_code=409, detail=f"order {data.number} exists")  # rolls back: no job
    return {"number": data.number, "invoice_job": job.id}


@get("/orders/{number:str}")
async def read_order(number: FromPath[str], fenceq_tx: NamedDependency[AsyncTransaction]) -> dict:
    rows = await fenceq_tx.execute(READ_ORDER, (number,))
    if not rows:
        raise NotFoundException(f"no order {number}")
    item, quantity, job_id = rows[0]
    job = await fenceq_tx.get_job(job_id)
    return {"number": number, "item": item, "quantity": quantity,
            "invoice": {"status": job.status, "result": job.result}}


api = Litestar(route_handlers=[place_order, read_order], plugins=[FenceqPlugin(tasks, worker=True)])
