"""Recommender data: MovieLens-100K from RecBole's wheel (atomic files), the processed Yambda layout of MLPerf
dlrmv4, Criteo's TSV of DLRM-DCNv2. May import what `suite.data` may.
"""
