from django.urls import path

from signups import views

urlpatterns = [
    path("signups/", views.sign_up),
    path("signups/<int:pk>/", views.signup),
]
