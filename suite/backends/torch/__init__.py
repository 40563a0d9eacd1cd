"""The plain PyTorch backend (`backend.TorchBackend`): eager, torch.compile, AMP, DDP, and the layouts of
`suite/backends/parallel/` (FSDP2, TP, PP, EP, AC). May import what `suite.backends` may.
"""
