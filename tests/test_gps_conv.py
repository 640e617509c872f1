"""``siggate.nn.GatedGPSConv`` against PyG's ``GPSConv``: same computation with
``gate="none"`` and the same weights, same parameter count, any local conv."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, GINEConv, GPSConv

from siggate.nn import GatedGPSConv

DT = torch.float64
C, HEADS = 16, 4


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    sizes = [5, 1, 8, 3, 8]
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    n = batch.numel()
    src = torch.arange(n - 1)
    keep = batch[src] == batch[src + 1]  # a path inside each graph
    ei = torch.stack([src[keep], src[keep] + 1])
    ei = torch.cat([ei, ei.flip(0)], 1)
    x = torch.randn(n, C, generator=g, dtype=DT)
    e = torch.randn(ei.size(1), C, generator=g, dtype=DT)
    return x, ei, e, batch


def make_conv(kind: str, seed: int):
    torch.manual_seed(seed)
    if kind == "gine":
        return GINEConv(nn.Sequential(nn.Linear(C, C), nn.ReLU(), nn.Linear(C, C))), {"edge_attr": True}
    if kind == "gcn":
        return GCNConv(C, C), {}
    return GATConv(C, C // 2, heads=2), {}


def copy_pyg_into_ours(pyg: GPSConv, ours: GatedGPSConv) -> None:
    """PyG's weights into ours: identical sub-module names, except the attention
    (``in_proj_weight`` packs q, k, v; ours is ``in_proj.weight``)."""
    state = {k: v for k, v in pyg.state_dict().items() if not k.startswith("attn.")}
    ours.load_state_dict(state, strict=False)
    with torch.no_grad():
        ours.attn.in_proj.weight.copy_(pyg.attn.in_proj_weight)
        ours.attn.in_proj.bias.copy_(pyg.attn.in_proj_bias)
        ours.attn.out_proj.weight.copy_(pyg.attn.out_proj.weight)
        ours.attn.out_proj.bias.copy_(pyg.attn.out_proj.bias)


def twins(kind: str, impl: str):
    conv, kw = make_conv(kind, 0)
    pyg = GPSConv(C, conv, heads=HEADS, dropout=0.0, attn_kwargs={"dropout": 0.0}).to(DT)
    conv2, _ = make_conv(kind, 0)
    ours = GatedGPSConv(C, conv2, heads=HEADS, dropout=0.0, attn_kwargs={"dropout": 0.0}, gate="none",
                        impl=impl).to(DT)
    copy_pyg_into_ours(pyg, ours)
    with torch.no_grad():  # non-zero attention biases so they are checked too
        for p1, p2 in ((pyg.attn.in_proj_bias, ours.attn.in_proj.bias), (pyg.attn.out_proj.bias, ours.attn.out_proj.bias)):
            p1.normal_()
            p2.copy_(p1)
    return pyg, ours, kw


@pytest.mark.parametrize("impl", ["auto", "reference", "sdpa", "packed"])
@pytest.mark.parametrize("kind", ["gine", "gcn", "gat"])
def test_ungated_equals_pyg_gpsconv_train_and_eval(kind, impl):
    pyg, ours, kw = twins(kind, impl)
    x, ei, e, batch = inputs()
    kwargs = {"edge_attr": e} if kw else {}
    for mode in ("train", "eval"):
        getattr(pyg, mode)()
        getattr(ours, mode)()
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        ref = pyg(x1, ei, batch, **kwargs)
        out = ours(x2, ei, batch, **kwargs)
        assert torch.allclose(out, ref, atol=1e-10), mode
        g1, = torch.autograd.grad((ref**2).sum(), x1)
        g2, = torch.autograd.grad((out**2).sum(), x2)
        assert torch.allclose(g1, g2, atol=1e-10), mode
    for name, buf in pyg.named_buffers():  # the train pass moved the BatchNorm statistics alike
        assert torch.allclose(buf.to(DT), dict(ours.named_buffers())[name].to(DT), atol=1e-10), name


@pytest.mark.parametrize("kind", ["gine", "gcn"])
def test_parameter_count_equals_pyg(kind):
    conv, _ = make_conv(kind, 0)
    conv2, _ = make_conv(kind, 0)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    pyg = GPSConv(C, conv, heads=HEADS)
    assert count(GatedGPSConv(C, conv2, heads=HEADS, gate="none")) == count(pyg)
    gated = GatedGPSConv(C, make_conv(kind, 0)[0], heads=HEADS)  # default: elementwise gate
    assert count(gated) - count(pyg) == gated.attn.gate_parameters() == C * C + C


@pytest.mark.parametrize("gate", ["headwise", "elementwise"])
@pytest.mark.parametrize("position", ["output", "value", "post"])
def test_gated_packed_equals_reference(gate, position):
    torch.manual_seed(0)
    a = GatedGPSConv(C, make_conv("gine", 0)[0], heads=HEADS, gate=gate, gate_position=position,
                     impl="packed").to(DT)
    b = GatedGPSConv(C, make_conv("gine", 0)[0], heads=HEADS, gate=gate, gate_position=position,
                     impl="reference").to(DT)
    b.load_state_dict(a.state_dict())
    x, ei, e, batch = inputs(1)
    o1, o2 = a(x, ei, batch, edge_attr=e), b(x, ei, batch, edge_attr=e)
    assert torch.allclose(o1, o2, atol=1e-10)
    (o1**2).sum().backward()
    (o2**2).sum().backward()
    for (name, p1), p2 in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(p1.grad, p2.grad, atol=1e-10), name


def test_no_batch_means_one_graph_and_attention_only():
    torch.manual_seed(0)
    ours = GatedGPSConv(C, None, heads=HEADS).to(DT).eval()
    x = torch.randn(6, C, dtype=DT)
    ei = torch.empty(2, 0, dtype=torch.long)
    assert torch.allclose(ours(x, ei), ours(x, ei, torch.zeros(6, dtype=torch.long)), atol=1e-12)


def test_reset_parameters_and_repr():
    conv = GINEConv(nn.Sequential(nn.Linear(C, C), nn.ReLU(), nn.Linear(C, C)))
    ours = GatedGPSConv(C, conv, heads=HEADS, gate="headwise", attn_kwargs={"dropout": 0.5})
    assert ours.attn.attn_dropout == 0.5
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    with torch.no_grad():
        for p in ours.parameters():
            p.fill_(3.0)
    ours.reset_parameters()
    after = ours.state_dict()
    for k, v in after.items():
        if v.dtype.is_floating_point and v.numel() > 1 and "norm" not in k:
            assert not torch.all(v == 3.0), k
    assert torch.all(ours.attn.in_proj.bias == 0.0)
    assert torch.equal(after["norm1.module.weight"], before["norm1.module.weight"])
    assert repr(ours) == (f"GatedGPSConv({C}, conv={conv}, heads={HEADS}, attn_type=multihead, gate=headwise, "
                          "gate_position=output)")


def test_unsupported_attention_is_refused():
    with pytest.raises(ValueError, match="'bigbird' is not supported"):
        GatedGPSConv(C, None, attn_type="bigbird")
    with pytest.raises(ValueError, match="add_bias_kv"):
        GatedGPSConv(C, None, attn_kwargs={"add_bias_kv": True})
    with pytest.raises(ValueError, match=r"\['feature_redraw_interval'\] are not supported with attn_type 'performer'"):
        GatedGPSConv(C, None, attn_type="performer", attn_kwargs={"feature_redraw_interval": 10})
    # PyG's kernel is a module; here it is named: "relu" gives PyG's features
    with pytest.raises(ValueError, match=r"kernel must be one of \('softmax', 'relu'\), got ReLU\(\)"):
        GatedGPSConv(C, None, attn_type="performer", attn_kwargs={"kernel": torch.nn.ReLU()})
    with pytest.raises(ValueError, match="num_features"):  # another type's option
        GatedGPSConv(C, None, attn_type="exphormer", attn_kwargs={"num_features": 8})
