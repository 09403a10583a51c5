"""The tasks the tests enqueue, one module per area. Their import paths are stored in job rows."""
