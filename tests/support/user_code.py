"""A user's own code, written outside the repository by the tests that plug it in (--algo, studies)."""

USER_OPTIMIZER = '''"""A user's own optimizer, outside the repository: Adam written out by hand."""
import torch

__version__ = "0.3.1"


class HandAdam(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["t"], st["m"], st["v"] = 0, torch.zeros_like(p), torch.zeros_like(p)
                st["t"] += 1
                st["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                st["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                mhat = st["m"] / (1 - b1 ** st["t"])
                vhat = st["v"] / (1 - b2 ** st["t"])
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.addcdiv_(mhat, vhat.sqrt().add_(group["eps"]), value=-group["lr"])
'''
