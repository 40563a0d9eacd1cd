"""Options shared by the commands that run workloads (`run`, `study`, `ab`, `bisect`)."""

from __future__ import annotations

from suite import registry

BACKEND_CHOICES = " | ".join(registry.BACKENDS)  # the registry's names: `run --help` never drifts
