"""fenceq's schema version 8 (its step 0008: one nonce per claim call,
claim_jobs), by fenceq's own migrate (fenceq/contrib/django/schema.py)."""

from django.db import migrations

from fenceq.contrib.django.schema import InstallFenceq


class Migration(migrations.Migration):
    # fenceq's step commits on a connection of its own, under fenceq's lock.
    atomic = False
    dependencies = [("fenceq", "0002_fenceq_v7")]
    operations = [InstallFenceq(version=8, previous=7)]
