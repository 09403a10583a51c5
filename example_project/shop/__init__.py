"""The example shop: orders whose side effects run as django_dbqueue jobs."""
