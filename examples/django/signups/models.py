from django.db import models


class Signup(models.Model):
    email = models.EmailField(unique=True)
    welcome_task = models.CharField(max_length=64)  # the id of the fenceq job that welcomes them
    welcomed_at = models.DateTimeField(null=True)
