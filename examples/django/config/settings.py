"""The example's settings. Django's database is PostgreSQL, reached as libpq
reaches it ($PGHOST, $PGPORT, $PGUSER, $PGPASSWORD); its name is $PGDATABASE,
else fenceq_django_example. fenceq's task backend enqueues in its
transactions, and `migrate` installs fenceq there."""

import os

SECRET_KEY = "the example's own key, not for production"
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
ROOT_URLCONF = "config.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
MIDDLEWARE = []  # a JSON API with neither sessions nor forms

INSTALLED_APPS = [
    "fenceq.contrib.django",  # manage.py fenceq_worker, and fenceq's schema through migrate
    "signups",
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("PGDATABASE", "fenceq_django_example"),
    }
}

TASKS = {
    "default": {
        "BACKEND": "fenceq.contrib.django.FenceqBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"DATABASE": "default"},  # enqueue in this database's transactions
    }
}
