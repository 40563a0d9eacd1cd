"""Graph data: containers (`graphs`) and readers (CSV, SDF, OGB raw layout). May import what `suite.data` may.
"""
