"""Integrations with web frameworks (docs/integrations.md): each module
imports its framework, installed with fenceq's extra of the same name."""
