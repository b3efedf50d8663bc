"""gnnflow.nn.adam.FusedAdam: torch.optim.Adam(fused=True)'s steps and state dicts, without
torch.optim's import of torch._dynamo."""

import copy
import subprocess
import sys

import pytest
import torch

from gnnflow.nn.adam import FusedAdam


def _params(seed: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(7, 5, generator=gen)),
            torch.nn.Parameter(torch.randn(5, generator=gen)),
            torch.nn.Parameter(torch.randn(3, 4, generator=gen, dtype=torch.float64)),
            torch.nn.Parameter(torch.randn(2, generator=gen))]  # never gets a gradient


def _grads(params: list[torch.nn.Parameter], step: int) -> None:
    gen = torch.Generator().manual_seed(1000 + step)
    for p in params[:3]:
        p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)


def _run(opt, params, steps: range) -> None:
    for k in steps:
        opt.zero_grad(set_to_none=bool(k % 2))
        _grads(params, k)
        opt.step()


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_steps_equal_torch_fused_adam_bit_for_bit():
    ours, theirs = _params(0), _params(0)
    kw = dict(lr=0.01, betas=(0.8, 0.99), eps=1e-7, weight_decay=5e-4)
    _run(FusedAdam(ours, **kw), ours, range(6))
    _run(torch.optim.Adam(theirs, fused=True, **kw), theirs, range(6))
    assert _same(ours, theirs)
    assert not torch.equal(ours[0], _params(0)[0])  # it moved
    assert torch.equal(ours[3], _params(0)[3])  # no gradient, no step


def test_groups_with_their_own_settings_step_as_torch_does():
    ours, theirs = _params(3), _params(3)

    def groups(params):
        return [{"params": params[:2], "lr": 0.05}, {"params": params[2:], "weight_decay": 0.1, "betas": (0.5, 0.9)}]

    _run(FusedAdam(groups(ours), lr=0.01), ours, range(4))
    _run(torch.optim.Adam(groups(theirs), lr=0.01, fused=True), theirs, range(4))
    assert _same(ours, theirs)


def test_a_load_casts_to_the_parameters_and_a_failed_one_changes_nothing():
    params = _params(4)
    opt = FusedAdam(params)
    _run(opt, params, range(2))
    saved = copy.deepcopy(opt.state_dict())
    saved["state"][0]["exp_avg"] = saved["state"][0]["exp_avg"].double()
    saved["state"][1]["step"] = 2.0  # a number, as very old torch checkpoints hold it
    other = FusedAdam([p.detach().clone().requires_grad_() for p in params])
    other.load_state_dict(saved)
    first = other.param_groups[0]["params"]
    assert other.state[first[0]]["exp_avg"].dtype == torch.float32
    assert other.state[first[1]]["step"].dtype == torch.float32 and float(other.state[first[1]]["step"]) == 2
    before = {k: dict(v) for k, v in opt.state.items()}
    bad = copy.deepcopy(opt.state_dict())
    bad["state"][0]["exp_avg"] = "not a tensor"
    with pytest.raises((TypeError, ValueError)):
        opt.load_state_dict(bad)
    assert {k: dict(v) for k, v in opt.state.items()}.keys() == before.keys()
    assert all(opt.state[p]["exp_avg"] is before[p]["exp_avg"] for p in before)


def test_state_dicts_load_either_way_and_continue_equal():
    ref = _params(1)
    ref_opt = torch.optim.Adam(ref, lr=0.02, weight_decay=1e-3, fused=True)
    _run(ref_opt, ref, range(4))
    # torch's state dict into ours, then three more steps each
    ours = [p.detach().clone().requires_grad_() for p in ref]
    opt = FusedAdam(ours, lr=0.5)
    opt.load_state_dict(ref_opt.state_dict())
    assert opt.param_groups[0]["lr"] == 0.02 and opt.param_groups[0]["weight_decay"] == 1e-3
    assert opt.state[ours[0]]["step"].dtype == torch.float32 and float(opt.state[ours[0]]["step"]) == 4
    _run(opt, ours, range(4, 7))
    _run(ref_opt, ref, range(4, 7))
    assert _same(ours, ref)
    # ours into torch's: the same layout
    back = [p.detach().clone().requires_grad_() for p in ours]
    theirs = torch.optim.Adam(back, lr=0.5, fused=True)
    saved = opt.state_dict()
    assert sorted(saved["state"]) == [0, 1, 2] and saved["param_groups"][0]["params"] == [0, 1, 2, 3]
    assert set(saved["param_groups"][0]) == set(ref_opt.state_dict()["param_groups"][0])
    theirs.load_state_dict(copy.deepcopy(saved))  # torch keeps the tensors it is given
    _run(theirs, back, range(7, 9))
    _run(opt, ours, range(7, 9))
    assert _same(ours, back)


def test_zero_grad_and_refusals():
    params = _params(2)
    opt = FusedAdam(params)
    _grads(params, 0)
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in params[:3])
    opt.zero_grad()
    assert all(p.grad is None for p in params)
    with pytest.raises(RuntimeError, match="floating-point"):
        FusedAdam([torch.zeros(3, dtype=torch.int64)])
    with pytest.raises(ValueError, match="empty"):
        FusedAdam([])
    with pytest.raises(ValueError, match="learning rate"):
        FusedAdam(params, lr=-1.0)
    with pytest.raises(ValueError, match="more than one"):
        FusedAdam([{"params": params[:2]}, {"params": params[1:3]}])
    with pytest.raises(ValueError, match="amsgrad"):
        FusedAdam([{"params": params, "amsgrad": True}])
    with pytest.raises(TypeError, match="iterable"):
        FusedAdam(params[0])
    with pytest.raises(TypeError, match="ordered"):
        FusedAdam([{"params": set(params)}])
    state = torch.optim.Adam(params, amsgrad=True).state_dict()
    with pytest.raises(ValueError, match="amsgrad"):
        FusedAdam(params).load_state_dict(state)
    state = torch.optim.AdamW(params, fused=True).state_dict()  # decoupled weight decay
    with pytest.raises(ValueError, match="decoupled_weight_decay"):
        FusedAdam(params).load_state_dict(state)


def test_training_step_does_not_import_dynamo():
    """The point of the class: a process that builds the strategies' optimizer and steps it does
    not import torch._dynamo (torch.optim.Adam does, on its first call)."""
    code = """
import sys
import torch
from gnnflow.config import TrainConfig
from gnnflow.strategies.common import make_optimizer
net = torch.nn.Linear(4, 2)
opt = make_optimizer(net, TrainConfig(graph="g"))
net(torch.randn(3, 4)).sum().backward()
opt.step()
opt.zero_grad()
print("dynamo" if "torch._dynamo" in sys.modules else "none")
torch.optim.Adam(net.parameters())
print("dynamo" if "torch._dynamo" in sys.modules else "none")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["none", "dynamo"]  # the second line: the check itself can fail
