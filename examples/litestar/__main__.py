"""``python -m examples.litestar``: examples/orders.py's ``serve``."""

from examples.orders import serve

from .app import api

serve(api)
