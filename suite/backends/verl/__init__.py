"""The veRL backend (`backend.VerlBackend`) for `task: grpo`: the spec as veRL trainer overrides (`adapt`) and
veRL's own trainer driven as a child of the run (`launch`). May import what `suite.backends` may.
"""
