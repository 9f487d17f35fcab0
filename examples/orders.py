"""What the FastAPI and Litestar examples (examples/fastapi,
examples/litestar) share: the order service's tasks and table, and how each
is started. Each example's app.py is the web side: the transaction in which
an order's row and its invoice job are written together."""

import logging
import os
import sys

import fenceq

tasks = fenceq.App("orders-example", queues=["invoices"])  # the database: $FENCEQ_DATABASE_URL


@tasks.task(queue="invoices", max_attempts=3)
def render_invoice(ctx, number: str, item: str, quantity: int) -> dict:
    return {"invoice": f"INV-{number}", "lines": [f"{quantity} x {item}"]}


# The application's statements (PostgreSQL's placeholders): an order's row
# names its invoice job; a number already taken inserts nothing.
PLACE_ORDER = ("INSERT INTO example_orders (number, item, quantity, invoice_job) VALUES (%s, %s, %s, %s)"
               " ON CONFLICT (number) DO NOTHING RETURNING number")
READ_ORDER = "SELECT item, quantity, invoice_job FROM example_orders WHERE number = %s"


def prepare(url: str) -> None:
    """Install fenceq in the database, its queue, and the application's table."""
    with fenceq.connect(url) as client:
        client.migrate()
        client.create_queue("invoices")
        with client.transaction() as tx:
            tx.execute("CREATE TABLE IF NOT EXISTS example_orders (number text PRIMARY KEY, item text NOT NULL,"
                       " quantity integer NOT NULL, invoice_job text NOT NULL)")


def serve(api: object) -> None:
    """``python -m examples.<framework>``: prepare the database named by
    $FENCEQ_DATABASE_URL, then serve the example with uvicorn on
    http://127.0.0.1:8000 ($PORT to change it)."""
    try:
        import uvicorn
    except ImportError:
        sys.exit("the example is served by uvicorn: pip install uvicorn")
    url = os.environ.get("FENCEQ_DATABASE_URL", "")
    if not url.startswith(("postgresql://", "postgres://")):
        sys.exit("set FENCEQ_DATABASE_URL to a PostgreSQL database, e.g. postgresql://localhost/orders")
    logging.basicConfig(level=logging.INFO)  # the worker's events too
    prepare(url)
    uvicorn.run(api, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
