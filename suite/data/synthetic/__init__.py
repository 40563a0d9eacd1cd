"""`trainbench data prepare NAME --synthetic`: small seeded files in each full-tier format (`files`) and the
`--set`s that point each tiny variant at them (`overrides`). May import what `suite.data` may.
"""
