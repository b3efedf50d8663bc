"""Adam on torch's fused kernel, without ``torch.optim``.

``torch.optim.Adam(..., fused=True)`` steps with one operator, ``torch._fused_adam_``, per device
and dtype.  Its base class, ``torch.optim.Optimizer``, wraps ``__init__``'s parameter groups,
``zero_grad``, the state dicts and ``step`` in ``torch._dynamo``'s switches, and so imports
``torch._dynamo`` (with sympy and the FX tracer) on its first call: 1.8-2.3 CPU seconds of every
process that trains (measured here: a one-epoch single-process run of a 3,000-vertex graph takes
7.7 CPU s, 3.4 s of them in that import under a profiler).  :class:`FusedAdam` calls the same
kernel with the same arguments, so its steps equal ``torch.optim.Adam(fused=True)``'s bit for bit
(test), and its state dict has ``torch.optim``'s layout, so checkpoints load in either (a fused
one continues bit for bit; one of the unfused Adam continues as fused Adam).

What it does not take: AMSGrad, ``maximize``, decoupled weight decay (AdamW), gradient scaling,
complex or integer parameters, sparse gradients, closures (gnnflow's strategies use none of
them; each is refused in one line, as a setting of a parameter group or of a loaded state dict).
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import torch

#: the devices torch's fused Adam kernel runs on
FUSED_DEVICES = ("cpu", "cuda")
#: ``torch.optim.Adam``'s settings this class does not take (refused when true)
REFUSED = ("amsgrad", "maximize", "differentiable", "decoupled_weight_decay")


def _settings(group: dict[str, Any]) -> dict[str, Any]:
    """A parameter group's settings: everything but its ``params``."""
    return {k: v for k, v in group.items() if k != "params"}


def _refuse(group: dict[str, Any], where: str) -> None:
    refused = [k for k in REFUSED if group.get(k)]
    if refused:
        raise ValueError(f"{where} sets {', '.join(refused)}, which FusedAdam does not take")


class FusedAdam:
    """Adam (Kingma and Ba; weight decay added to the gradient, as ``torch.optim.Adam``) whose
    step is ``torch._fused_adam_``: ``param_groups``, ``state``, ``zero_grad``, ``step``,
    ``state_dict`` and ``load_state_dict`` as in ``torch.optim``."""

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"Invalid beta parameters: {betas}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        # torch.optim.Adam's group keys, so that a state dict reads the same either way
        self.defaults: dict[str, Any] = {
            "lr": lr, "betas": (float(betas[0]), float(betas[1])), "eps": eps, "weight_decay": weight_decay,
            "amsgrad": False, "maximize": False, "foreach": None, "capturable": False, "differentiable": False,
            "fused": True, "decoupled_weight_decay": False}
        self.state: defaultdict[torch.Tensor, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, torch.Tensor):
            raise TypeError(f"params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {torch.typename(params)}")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group: dict[str, Any]) -> None:
        _refuse(group, "parameter group")
        params = group["params"]
        if isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, not a set")
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in params:
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {torch.typename(p)}")
            if not (p.is_leaf or p.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
            if not p.is_floating_point() or p.device.type not in FUSED_DEVICES:
                raise RuntimeError(f"FusedAdam takes floating-point parameters on {' or '.join(FUSED_DEVICES)}, "
                                   f"not {p.dtype} on {p.device.type}")
            if id(p) in seen:
                raise ValueError("some parameters appear in more than one parameter group")
            seen.add(id(p))
        self.param_groups.append({**self.defaults, **_settings(group), "params": params})

    def zero_grad(self, set_to_none: bool = True) -> None:
        grads: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = defaultdict(list)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                    continue
                if p.grad.grad_fn is not None:
                    p.grad.detach_()
                else:
                    p.grad.requires_grad_(False)
                grads[(p.grad.device, p.grad.dtype)].append(p.grad)
        for same in grads.values():
            torch._foreach_zero_(same)

    @torch.no_grad()
    def step(self, closure: None = None) -> None:
        if closure is not None:
            raise ValueError("FusedAdam.step takes no closure")
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lists: dict[tuple[torch.device, torch.dtype], tuple[list[torch.Tensor], ...]] = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Adam does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                found = lists.setdefault((p.device, p.dtype), ([], [], [], [], []))
                for into, value in zip(found, (p, p.grad, state["exp_avg"], state["exp_avg_sq"], state["step"]),
                                       strict=True):
                    into.append(value)
            for params, grads, exp_avgs, exp_avg_sqs, steps in lists.values():
                torch._foreach_add_(steps, 1)
                torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=group["lr"],
                                   beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"],
                                   maximize=False, grad_scale=None, found_inf=None)

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Optimizer.state_dict``'s layout: parameters by their index over the groups."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            ids = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append({**_settings(group), "params": ids})
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if s}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict of this class or of ``torch.optim.Adam`` (any of its settings but the
        ones refused at the top of the module); state tensors move to their parameter's device."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups) or any(
                len(s["params"]) != len(g["params"]) for s, g in zip(saved, self.param_groups, strict=True)):
            raise ValueError("loaded state dict's parameter groups do not match the optimizer's")
        for group in saved:
            _refuse(group, "loaded state dict")
        by_index = {i: p for s, g in zip(saved, self.param_groups, strict=True)
                    for i, p in zip(s["params"], g["params"], strict=True)}
        unknown = sorted(set(state_dict["state"]) - set(by_index))
        if unknown:
            raise ValueError(f"loaded state dict has state for parameters {unknown[:5]} that no group lists")
        state: defaultdict[torch.Tensor, dict[str, Any]] = defaultdict(dict)
        for i, values in copy.deepcopy(state_dict["state"]).items():
            p = by_index[i]
            state[p] = {
                key: value.to(dtype=torch.float32 if key == "step" else p.dtype, device=p.device)
                if isinstance(value, torch.Tensor) else torch.tensor(float(value), dtype=torch.float32, device=p.device)
                for key, value in values.items()}
        self.state = state  # only once every tensor moved: a failed load leaves the optimizer as it was
        self.param_groups = [{**self.defaults, **_settings(s), "fused": True, "params": g["params"]}
                             for s, g in zip(saved, self.param_groups, strict=True)]
