"""fenceq's schema version 9 (its step 0009: the fence rule written once,
PostgreSQL only), by fenceq's own migrate (fenceq/contrib/django/schema.py)."""

from django.db import migrations

from fenceq.contrib.django.schema import InstallFenceq


class Migration(migrations.Migration):
    # fenceq's step commits on a connection of its own, under fenceq's lock.
    atomic = False
    dependencies = [("fenceq", "0003_fenceq_v8")]
    operations = [InstallFenceq(version=9, previous=8)]
