from django.utils import timezone

try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # Django 4.2 to 5.2, with the django-tasks package

from .models import Signup


@task
def send_welcome(email: str) -> str:
    # A real project sends the email here. The worker sees this job only once
    # the signup's transaction has committed, so the row is there.
    Signup.objects.filter(email=email).update(welcomed_at=timezone.now())
    return f"welcome sent to {email}"
