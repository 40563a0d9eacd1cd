"""Model builders shared by workloads; each module exposes COMPONENT with a pydantic Config and build()."""
