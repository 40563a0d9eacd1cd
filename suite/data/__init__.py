"""Data set readers; each module exposes COMPONENT with a pydantic Config and load()."""
