"""The Python behind the specs: one module per task (image classification, language modelling, ...)."""
