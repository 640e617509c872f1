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
    """PyG's weights into ours, as a user loads a saved ``GPSConv``: its state dict, strictly
    (ours renames ``attn.in_proj_weight``/``_bias`` to ``attn.in_proj.weight``/``.bias``;
    every other name is the same)."""
    ours.load_state_dict(pyg.state_dict())


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


def test_a_gpsconv_state_dict_loads_and_a_gated_conv_refuses_its_missing_gate_rows():
    """A saved ``GPSConv``'s state dict did not load (``attn.in_proj_weight`` is
    ``attn.in_proj.weight`` here): 'Missing key(s)... Unexpected key(s)'. It loads into the
    ungated conv (the weights are the same tensors' values) and is refused by size into a gated one."""
    torch.manual_seed(0)
    conv, _ = make_conv("gine", 0)
    pyg = GPSConv(C, conv, heads=HEADS)
    state = pyg.state_dict()
    ours = GatedGPSConv(C, make_conv("gine", 0)[0], heads=HEADS, gate="none")
    ours.load_state_dict(state)
    assert torch.equal(ours.attn.in_proj.weight, pyg.attn.in_proj_weight)
    assert "attn.in_proj_weight" in state  # the caller's dict is left as it was
    gated = GatedGPSConv(C, make_conv("gine", 0)[0], heads=HEADS, gate="elementwise")
    with pytest.raises(RuntimeError, match=r"size mismatch for attn.in_proj.weight"):
        gated.load_state_dict(state)


def test_exphormer_takes_edge_features_of_its_own_beside_a_conv_of_another_width():
    """``GINEConv(mlp, edge_dim=4)`` with ``attn_type="exphormer"``: the conv's 4-wide edge_attr
    went to the attention too, which needs [E, channels]; there was no way to give both."""
    from torch_geometric.nn import GINEConv

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(C, C), torch.nn.ReLU(), torch.nn.Linear(C, C))
    conv = GatedGPSConv(C, GINEConv(mlp, edge_dim=4), heads=HEADS, attn_type="exphormer").to(DT).eval()
    x, ei, _, batch = inputs()
    e4 = torch.randn(ei.size(1), 4, dtype=DT)
    with pytest.raises(ValueError, match="give the attention edge features of that width as attn_edge_attr="):
        conv(x, ei, batch, edge_attr=e4)
    ec = torch.randn(ei.size(1), C, dtype=DT)
    out = conv(x, ei, batch, edge_attr=e4, attn_edge_attr=ec)
    assert out.shape == x.shape and torch.isfinite(out).all()
    assert not torch.allclose(out, conv(x, ei, batch, edge_attr=e4, attn_edge_attr=ec + 1))  # it scores with them
