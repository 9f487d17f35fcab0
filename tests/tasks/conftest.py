"""Shared by the typed-task tests."""

PATIENCE = 60.0  # seconds: bounds a failure only
