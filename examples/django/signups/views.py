from django.db import IntegrityError, transaction
from django.http import JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET, require_POST

from .models import Signup
from .tasks import send_welcome


@require_POST
def sign_up(request):
    email = request.POST["email"]
    try:
        with transaction.atomic():
            welcome = send_welcome.enqueue(email)  # a fenceq job, inside this transaction
            signup = Signup.objects.create(email=email, welcome_task=welcome.id)
    except IntegrityError:  # signed up already: the rollback takes the job with it
        return JsonResponse({"error": f"{email} has signed up already"}, status=409)
    return JsonResponse({"signup": signup.pk, "welcome_task": welcome.id}, status=201)


@require_GET
def signup(request, pk):
    signup = get_object_or_404(Signup, pk=pk)
    welcome = send_welcome.get_result(signup.welcome_task)  # read from the job
    return JsonResponse({
        "email": signup.email,
        "welcome": welcome.status,
        "result": welcome.return_value if welcome.status == "SUCCESSFUL" else None,
        "welcomed_at": signup.welcomed_at,
    })
