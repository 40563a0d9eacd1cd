"""The suite GPT (`arch: gpt`, `model`): the small decoder of the standard language-model workloads. May import
what `suite.models` may.
"""
