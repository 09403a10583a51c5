"""URLs of the test project: the admin, and a view that enqueues."""

from django.contrib import admin
from django.urls import path

from tests.testapp.views import checkout

urlpatterns = [path("admin/", admin.site.urls), path("checkout/", checkout)]
