"""Data set readers; each module exposes COMPONENT with a pydantic Config and load().

Owns where data lives (`locate`), what a missing data set says (`download`, `DataMissing`), `trainbench data
prepare`, and one reader per on-disk format (IDX, CIFAR batches, ImageFolder, token shards, OGB, SDF, ...).
Readers never download at run time; a fixture that needs a model (a tiny Hugging Face folder) is written by
`suite.models.hf.fixtures`, a layer up.

May import: `suite.registry`. Never: `suite.models`, `suite.workloads`, `suite.algorithms`, `suite.backends`,
`suite.execution`, `suite.results`.
"""
