"""The installed app ``fenceq.contrib.django`` (label ``fenceq``): the
``fenceq_worker`` command, the migrations that install fenceq's schema, and
its backends' queues created after each ``migrate``."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class FenceqConfig(AppConfig):
    name = "fenceq.contrib.django"
    label = "fenceq"
    verbose_name = "fenceq"

    def ready(self) -> None:
        from .schema import create_queues

        post_migrate.connect(create_queues, sender=self)
