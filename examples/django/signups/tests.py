"""The example's tests. Django's test runner makes a test database
(`migrate` installs fenceq there and creates the queue), the worker runs as
the README starts it (manage.py fenceq_worker, on the test database), and
the requests go through Django's test client."""

import os
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection
from django.test import TransactionTestCase

try:
    from django.tasks import task_backends
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued
except ImportError:  # Django 4.2 to 5.2, with the django-tasks package
    from django_tasks import task_backends
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued

from .models import Signup
from .tasks import send_welcome

MANAGE = Path(__file__).resolve().parents[1] / "manage.py"
PATIENCE = 60  # seconds: bounds a failure only


class SignupTests(TransactionTestCase):  # each request commits, as it does outside tests
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        test_database = {**os.environ, "PGDATABASE": connection.settings_dict["NAME"]}
        cls.worker = subprocess.Popen([sys.executable, str(MANAGE), "fenceq_worker", "--log-level", "warning"],
                                      env=test_database)

    @classmethod
    def tearDownClass(cls):
        cls.worker.terminate()
        cls.worker.wait(PATIENCE)
        task_backends.close_all()  # fenceq's own connection: the test database is dropped next
        super().tearDownClass()

    def test_a_signup_is_welcomed_by_the_worker(self):
        response = self.client.post("/signups/", {"email": "ada@example.com"})
        self.assertEqual(response.status_code, 201)
        url = f"/signups/{response.json()['signup']}/"
        deadline = time.monotonic() + PATIENCE
        while (body := self.client.get(url).json())["welcome"] != "SUCCESSFUL":
            self.assertIn(body["welcome"], ["READY", "RUNNING"])
            self.assertLess(time.monotonic(), deadline, "the worker did not run the job")
            time.sleep(0.1)
        self.assertEqual(body["result"], "welcome sent to ada@example.com")
        self.assertIsNotNone(body["welcomed_at"])

    def test_a_signup_that_rolls_back_leaves_no_job(self):
        enqueued = []

        def remember(sender, task_result, **kwargs):
            enqueued.append(task_result.id)

        task_enqueued.connect(remember)
        try:
            first = self.client.post("/signups/", {"email": "grace@example.com"})
            again = self.client.post("/signups/", {"email": "grace@example.com"})
        finally:
            task_enqueued.disconnect(remember)
        self.assertEqual((first.status_code, again.status_code), (201, 409))
        self.assertEqual(len(enqueued), 2)
        self.assertEqual(send_welcome.get_result(enqueued[0]).id, enqueued[0])
        with self.assertRaises(TaskResultDoesNotExist):
            send_welcome.get_result(enqueued[1])
        self.assertEqual(Signup.objects.count(), 1)
