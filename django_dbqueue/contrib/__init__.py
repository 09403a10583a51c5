"""Integrations with other tools, each behind an optional extra: import only what you use."""
