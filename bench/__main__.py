"""Entry point: ``python -m bench`` (``make bench``)."""
from .run import main

raise SystemExit(main())
