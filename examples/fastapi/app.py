"""The FastAPI example (README.md beside it): placing an order writes the
application's row and the job that renders its invoice in one request
transaction; the worker runs on the application's event loop; reading the
order shows the invoice once the job has run."""

from typing import Annotated

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from examples.orders import PLACE_ORDER, READ_ORDER, render_invoice, tasks
from fenceq.client import AsyncTransaction
from fenceq.contrib.fastapi import Fenceq

integration = Fenceq(tasks, worker=True)
api = FastAPI(title="fenceq orders example", lifespan=integration.lifespan)
Transaction = Annotated[AsyncTransaction, integration.transaction]


class Order(BaseModel):
    number: str
    item: str
    quantity: int = 1


@api.post("/orders", status_code=201)
async def place_order(order: Order, tx: Transaction) -> dict:
    job = await render_invoice.using(tx).submit_async(number=order.number, item=order.item,
                                                      quantity=order.quantity)
    if not await tx.execute(PLACE_ORDER, (order.number, order.item, order.quantity, job.id)):
        raise HTTPException(409, f"order {order.number} exists")  # the transaction rolls back: no job
    return {"number": order.number, "invoice_job": job.id}


@api.get("/orders/{number}")
async def read_order(number: str, tx: Transaction) -> dict:
    rows = await tx.execute(READ_ORDER, (number,))
    if not rows:
        raise HTTPException(404, f"no order {number}")
    item, quantity, job_id = rows[0]
    job = await tx.get_job(job_id)
    return {"number": number, "item": item, "quantity": quantity,
            "invoice": {"status": job.status, "result": job.result}}
