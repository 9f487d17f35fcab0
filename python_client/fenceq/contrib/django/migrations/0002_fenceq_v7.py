"""fenceq's schema version 7 (its step 0007: the operator's view over time,
docs/design-v7.md), by fenceq's own migrate (fenceq/contrib/django/schema.py)."""

from django.db import migrations

from fenceq.contrib.django.schema import InstallFenceq


class Migration(migrations.Migration):
    # fenceq's step commits on a connection of its own, under fenceq's lock.
    atomic = False
    dependencies = [("fenceq", "0001_fenceq_v6")]
    operations = [InstallFenceq(version=7, previous=6)]
