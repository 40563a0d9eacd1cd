"""Graph networks: GCN (node classification), GINE (graph classification). May import what `suite.models` may.
"""
