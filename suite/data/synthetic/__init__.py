"""`trainbench data prepare NAME --synthetic`: small seeded files in each full-tier format (`files`) and the
`--set`s that point each tiny variant at them (`overrides`), among them rl/gsm8k_grpo's tiny Qwen2 model folder
(`gsm8k`). The generator writes every full-tier format, model folders included: it sits above the readers and the
models, and no reader or model imports it.

May import: `suite.data`, `suite.models` (the model folders it writes), `suite.registry`. Never: `suite.backends`, `suite.execution`, `suite.results`.
"""
