"""Text data: token streams and shards (`streams`), tokenizers and chat templates, Megatron indexed data sets,
MLPerf's GovReport, the LoRA workload's pretrained base. May import what `suite.data` may.
"""
