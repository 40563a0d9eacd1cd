"""Recommender models (MLPerf dlrmv4's HSTU, DLRM-DCNv2) and their embedding tables, one module each; the sharding
of tables over a process group sits beside them (sharding.py). May import: `suite.registry`, `suite.measure`.
Never: `suite.workloads`, `suite.backends`, `suite.execution`.
"""
