"""``python -m examples.fastapi``: examples/orders.py's ``serve``."""

from examples.orders import serve

from .app import api

serve(api)
