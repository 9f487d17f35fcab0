"""fenceq's schema through version 6 (its steps 0001 to 0006), by fenceq's
own migrate (fenceq/contrib/django/schema.py). A fenceq release with a new
schema version adds the next migration: ``InstallFenceq(version=7,
previous=6)``."""

from django.db import migrations

from fenceq.contrib.django.schema import InstallFenceq


class Migration(migrations.Migration):
    # fenceq's steps commit one by one on connections of their own, under fenceq's lock.
    atomic = False
    initial = True
    dependencies: list = []
    operations = [InstallFenceq(version=6, previous=0)]
