"""URLs of the example project: the admin, where jobs can be inspected."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
