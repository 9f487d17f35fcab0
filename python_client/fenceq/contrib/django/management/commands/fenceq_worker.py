"""``manage.py fenceq_worker``: a fenceq worker for a task backend's queues
(docs/integrations.md#django), with ``fenceq worker``'s options; its
database is the backend's unless ``--url`` says otherwise."""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fenceq.cli import UserError, add_worker_options, cmd_worker
from fenceq.contrib.django import BACKEND_VARIABLE, FenceqBackend, InvalidTaskBackend, task_backends
from fenceq.errors import FenceqError


class Command(BaseCommand):
    help = ("Run a fenceq worker for the tasks of a fenceq task backend. The options are those of "
            "`fenceq worker`; each default can be set in its FENCEQ_WORKER_* variable.")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--backend", default="default",
                            help="the TASKS alias whose tasks to run (default: default); the worker serves its "
                                 "QUEUES unless --queue says otherwise")
        parser.add_argument("--url", help="fenceq's database (default: the backend's)")
        add_worker_options(parser)

    def handle(self, *args: Any, backend: str, url: str | None, **options: Any) -> None:
        try:
            chosen = task_backends[backend]
        except InvalidTaskBackend as error:
            raise CommandError(str(error)) from None
        if not isinstance(chosen, FenceqBackend):
            raise CommandError(f"the task backend {backend!r} is not fenceq's FenceqBackend")
        # `fenceq.contrib.django`'s app is this backend's, here and in each process of --processes.
        os.environ[BACKEND_VARIABLE] = backend
        try:
            cmd_worker(argparse.Namespace(app="fenceq.contrib.django", url=url or chosen.url, **options))
        except (UserError, FenceqError) as error:
            raise CommandError(str(error)) from None
