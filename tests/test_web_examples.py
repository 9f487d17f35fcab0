"""examples/fastapi and examples/litestar, each driven through its
framework's own test client against a real PostgreSQL database: an order
commits its row and its invoice job together and the worker on the
application's loop renders the invoice, read back through the example's own
endpoint; an order whose number is taken is refused, its job rolled back
with it."""

import importlib

import pytest

import fenceq
from examples.orders import prepare

TEST_CLIENTS = {"fastapi": "fastapi.testclient", "litestar": "litestar.testing"}


@pytest.mark.parametrize("framework", sorted(TEST_CLIENTS))
def test_the_example_places_an_order_and_renders_its_invoice(framework, pg, monkeypatch):
    pytest.importorskip(framework)
    example = importlib.import_module(f"examples.{framework}.app")
    test_client = importlib.import_module(TEST_CLIENTS[framework]).TestClient
    monkeypatch.setenv("FENCEQ_DATABASE_URL", pg.url)
    prepare(pg.url)
    with test_client(example.api) as web:
        placed = web.post("/orders", json={"number": "A-1", "item": "tea", "quantity": 2})
        taken = web.post("/orders", json={"number": "A-1", "item": "coffee"})
        with fenceq.connect(pg.url) as client:
            assert client.wait(placed.json()["invoice_job"], timeout=60).status == "completed"
        order = web.get("/orders/A-1").json()
        missing = web.get("/orders/B-2")
    assert (placed.status_code, taken.status_code, missing.status_code) == (201, 409, 404)
    assert order == {"number": "A-1", "item": "tea", "quantity": 2,
                     "invoice": {"status": "completed", "result": {"invoice": "INV-A-1", "lines": ["2 x tea"]}}}
    assert pg.sql("SELECT payload->>'item' FROM fenceq.jobs WHERE queue = 'invoices'") == [("tea",)]
