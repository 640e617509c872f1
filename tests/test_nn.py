"""Attention, GPS layer and model: values against independent references and invariances."""

import copy
import math

import numpy as np
import pytest
import torch
from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
from torch_geometric.data import Batch, Data

from siggate.nn import GatedGCNLocal, GatedMultiheadAttention, GINELocal, GPSLayer, SigGateGT


@pytest.fixture(autouse=True)
def _double():
    """float64 inside this module only (exact comparisons); restored for every other test."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def padded_input(B=3, N=7, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, d, generator=g)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 4:] = False
    mask[2, 1:] = False  # a one-node graph
    return x, mask


def load_into_mha(att: GatedMultiheadAttention) -> torch.nn.MultiheadAttention:
    d = att.dim
    mha = torch.nn.MultiheadAttention(d, att.heads, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(att.in_proj.weight[: 3 * d])
        mha.in_proj_bias.copy_(att.in_proj.bias[: 3 * d])
        mha.out_proj.weight.copy_(att.out_proj.weight)
        mha.out_proj.bias.copy_(att.out_proj.bias)
    return mha.eval()


@pytest.mark.parametrize("impl", ["auto", "reference", "sdpa", "packed"])
def test_ungated_equals_torch_multihead_attention(impl):
    att = GatedMultiheadAttention(16, 4, gate="none", impl=impl).eval()
    with torch.no_grad():  # non-zero biases so they are checked too
        att.in_proj.bias.normal_()
        att.out_proj.bias.normal_()
    mha = load_into_mha(att)
    x, mask = padded_input()
    ref, _ = mha(x, x, x, key_padding_mask=~mask, need_weights=False)
    out = att(x, mask)
    assert torch.allclose(out[mask], ref[mask], atol=1e-10)


@pytest.mark.parametrize("gate", ["headwise", "elementwise"])
def test_fully_open_gate_is_identity_scaling(gate):
    att = GatedMultiheadAttention(16, 4, gate=gate, gate_bias_init=40.0, gate_weight_std=0.0).eval()
    mha = load_into_mha(att)
    x, mask = padded_input()
    ref, _ = mha(x, x, x, key_padding_mask=~mask, need_weights=False)
    out, det = att(x, mask, return_details=True)
    # sigmoid(40) = 1 - 4e-18: the gate is 1 up to float64 rounding
    assert torch.allclose(det["gate"], torch.ones_like(det["gate"]))
    assert torch.allclose(out[mask], ref[mask], atol=1e-10)


@pytest.mark.parametrize("gate", ["headwise", "elementwise"])
def test_gate_at_constant_half_halves_head_outputs(gate):
    att = GatedMultiheadAttention(16, 4, gate=gate, gate_bias_init=0.0, gate_weight_std=0.0).eval()
    x, mask = padded_input()
    out, det = att(x, mask, return_details=True)
    assert torch.allclose(det["head_out_gated"], 0.5 * det["head_out"])
    expected = att.out_proj(0.5 * det["head_out"].reshape(*x.shape[:2], -1))
    assert torch.allclose(out, expected)


@pytest.mark.parametrize("d,H", [(16, 4), (64, 8), (96, 4)])
def test_gate_parameter_counts(d, H):
    base = sum(p.numel() for p in GatedMultiheadAttention(d, H, gate="none").parameters())
    head = sum(p.numel() for p in GatedMultiheadAttention(d, H, gate="headwise").parameters())
    elem = sum(p.numel() for p in GatedMultiheadAttention(d, H, gate="elementwise").parameters())
    assert base == 4 * d * d + 4 * d
    assert elem - base == d * d + d
    assert head - base == d * H + H


@pytest.mark.parametrize("impl", ["sdpa", "packed"])
@pytest.mark.parametrize("gate", ["none", "headwise", "elementwise"])
@pytest.mark.parametrize("position", ["output", "value", "post"])
def test_every_impl_matches_reference(impl, gate, position):
    """Each implementation against ``impl="reference"`` (``return_details`` runs it):
    outputs on real nodes, input and parameter gradients."""
    torch.manual_seed(0)
    att = GatedMultiheadAttention(16, 4, gate=gate, gate_position=position, attn_dropout=0.0, impl=impl)
    x, mask = padded_input()
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    o1 = att(x1, mask)
    (o1[mask] ** 2).sum().backward()
    g1 = [p.grad.clone() for p in att.parameters()]
    att.zero_grad()
    o2, _ = att(x2, mask, return_details=True)
    (o2[mask] ** 2).sum().backward()
    g2 = [p.grad.clone() for p in att.parameters()]
    assert torch.allclose(o1[mask], o2[mask], atol=1e-10)
    assert torch.allclose(x1.grad, x2.grad, atol=1e-10)
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, atol=1e-10)


def test_attention_details_shapes_and_rows_sum_to_one():
    att = GatedMultiheadAttention(16, 4, gate="headwise").eval()
    x, mask = padded_input()
    _, det = att(x, mask, return_details=True)
    assert det["attn"].shape == (3, 4, 7, 7)
    assert det["gate"].shape == (3, 7, 4, 1)
    assert det["head_out"].shape == (3, 7, 4, 4)
    assert torch.allclose(det["attn"].sum(-1), torch.ones(3, 4, 7))
    assert (det["attn"][1, :, :, 4:] == 0).all()  # padded keys get no mass


def test_gradients_reach_gate_parameters():
    att = GatedMultiheadAttention(16, 4, gate="elementwise")
    x, mask = padded_input()
    att(x, mask)[mask].sum().backward()
    gate_grad = att.in_proj.weight.grad[48:]
    assert gate_grad.abs().sum() > 0
    assert att.in_proj.bias.grad[48:].abs().sum() > 0


def test_reset_parameters_and_repr():
    att = GatedMultiheadAttention(16, 4, gate="elementwise", gate_bias_init=2.0)
    with torch.no_grad():
        att.in_proj.bias.fill_(7.0)
    att.reset_parameters()
    assert torch.all(att.in_proj.bias[48:] == 2.0)
    assert torch.all(att.in_proj.bias[:48] == 0.0)
    assert "gate='elementwise'" in repr(att) and "heads=4" in repr(att)
    layer = GPSLayer(16, 4, local="gatedgcn")
    assert "local='gatedgcn'" in repr(layer)


def test_invalid_arguments_are_refused():
    with pytest.raises(ValueError, match="divisible"):
        GatedMultiheadAttention(10, 4)
    with pytest.raises(ValueError, match="gate must be one of"):
        GatedMultiheadAttention(16, 4, gate="sigmoid")
    with pytest.raises(ValueError, match="local must be one of"):
        GPSLayer(16, 4, local="gcn")


def test_gatedgcn_matches_loop_reference():
    torch.manual_seed(0)
    conv = GatedGCNLocal(8).eval()
    with torch.no_grad():
        conv.bn_node.running_mean.normal_()
        conv.bn_edge.running_var.uniform_(0.5, 2)
    x = torch.randn(4, 8)
    ei = torch.tensor([[0, 1, 1, 2, 3, 0], [1, 0, 2, 1, 0, 3]])
    e = torch.randn(6, 8)
    h, e_out = conv(x, ei, e)
    A, B, D, E = (w.view(8, 8) for w in conv.node_proj.weight.chunk(4, 0))
    bA, bB, bD, bE = conv.node_proj.bias.chunk(4)
    lin = lambda W, b, v: W @ v + b  # noqa: E731
    bn = lambda m, v: (v - m.running_mean) / torch.sqrt(m.running_var + m.eps) * m.weight + m.bias  # noqa: E731
    for i in range(4):
        num, den = torch.zeros(8), torch.zeros(8)
        for k in range(6):
            j, t = ei[0, k].item(), ei[1, k].item()
            if t != i:
                continue
            eij = lin(conv.C.weight, conv.C.bias, e[k]) + lin(D, bD, x[i]) + lin(E, bE, x[j])
            s = torch.sigmoid(eij)
            num += s * lin(B, bB, x[j])
            den += s
            ref_e = e[k] + torch.relu(bn(conv.bn_edge, eij))
            assert torch.allclose(e_out[k], ref_e, atol=1e-10)
        hi = lin(A, bA, x[i]) + num / (den + 1e-6)
        assert torch.allclose(h[i], x[i] + torch.relu(bn(conv.bn_node, hi)), atol=1e-10)


def test_gine_matches_pyg_gineconv():
    from torch_geometric.nn import GINEConv

    torch.manual_seed(0)
    ours = GINELocal(8)
    ref = GINEConv(ours.mlp)
    x, e = torch.randn(5, 8), torch.randn(6, 8)
    ei = torch.tensor([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 2]])
    assert torch.allclose(ours(x, ei, e)[0], ref(x, ei, e), atol=1e-10)


class MeanLocal(torch.nn.Module):
    """A local MPNN written from ARCHITECTURE.md's recipe: the mean of ``x_j + e_ji`` over
    the in-neighbours, then a linear map; the edges pass through (``updates_edges = False``)."""

    updates_edges = False

    def __init__(self, dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(dim, dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()

    def forward(self, x, edge_index, edge_attr):
        src, dst = edge_index
        total = x.new_zeros(x.shape).index_add_(0, dst, x[src] + edge_attr)
        count = x.new_zeros(x.size(0)).index_add_(0, dst, x.new_ones(dst.numel())).clamp(min=1)
        return self.lin(total / count[:, None]), edge_attr


class EdgeMeanLocal(MeanLocal):
    """The recipe's other kind (``updates_edges = True``): it updates the edges and adds
    its own residual, ``(x + MeanLocal(x), e + tanh(e))``."""

    updates_edges = True

    def forward(self, x, edge_index, edge_attr):
        h, _ = super().forward(x, edge_index, edge_attr)
        return x + h, edge_attr + torch.tanh(edge_attr)


@pytest.mark.parametrize("cls", [MeanLocal, EdgeMeanLocal])
def test_a_local_mpnn_built_from_the_recipe(cls, monkeypatch):
    """A class with the recipe's constructor, forward, reset_parameters and updates_edges,
    registered in LOCAL_MODELS and LOCAL_MODEL_NAMES, works in SigGateGT: the GPS layer in
    eval is GraphGPS's recipe around it (computed here by hand), training reaches its
    weights, and for_inference() equals the model in eval."""
    import siggate.options as options
    from siggate.nn import LOCAL_MODELS

    monkeypatch.setitem(LOCAL_MODELS, "mine", cls)
    monkeypatch.setattr(options, "LOCAL_MODEL_NAMES", (*options.LOCAL_MODEL_NAMES, "mine"))
    torch.manual_seed(0)
    model = SigGateGT(1, dim=16, layers=2, heads=4, local="mine", gate="elementwise", dropout=0.1)
    batch = Batch.from_data_list([random_graph(n, s) for s, n in enumerate([6, 13, 3, 9])])
    model.train()
    model(batch).sum().backward()
    assert all(layer.local.lin.weight.grad.abs().sum() > 0 for layer in model.layers)
    _trained_bn(model, batch)
    layer = model.layers[0]
    x = torch.randn(batch.num_nodes, 16)
    e = torch.randn(batch.edge_index.size(1), 16)
    with torch.no_grad():
        h, e_out = layer(x, batch.edge_index, e, batch.batch)
        mine, e_mine = layer.local(x, batch.edge_index, e)
        local = layer.norm_local(mine if cls.updates_edges else x + mine)
        attn = layer.norm_attn(x + layer.attn.forward_nodes(x, layer.attn.make_layout(batch.batch, batch.edge_index)))
        hid = local + attn
        expected = layer.norm_ff(hid + layer.ff2(torch.relu(layer.ff1(hid))))
        assert torch.allclose(h, expected, atol=1e-10)
        assert torch.equal(e_out, e_mine) and torch.equal(e_out, e) != cls.updates_edges
        assert torch.allclose(model.for_inference()(batch), model(batch), atol=1e-10)


def random_graph(n, seed, feat="ogb"):
    g = torch.Generator().manual_seed(seed)
    src = torch.arange(n - 1)
    dst = src + 1
    extra = torch.randint(0, n, (2, n // 2), generator=g)
    ei = torch.cat([torch.stack([src, dst]), extra], 1)
    ei = ei[:, ei[0] != ei[1]]
    ei = torch.cat([ei, ei.flip(0)], 1)
    x = torch.stack([torch.randint(0, k, (n,), generator=g) for k in get_atom_feature_dims()], 1)
    ea = torch.stack([torch.randint(0, k, (ei.size(1),), generator=g) for k in get_bond_feature_dims()], 1)
    rw = torch.rand(n, 8, generator=g)
    lv, ll = torch.randn(n, 4, generator=g), torch.rand(n, 4, generator=g)
    if n < 4:
        lv[:, n:] = float("nan")
        ll[:, n:] = float("nan")
    return Data(x=x, edge_index=ei, edge_attr=ea, rwse=rw, lap_vec=lv, lap_val=ll, y=torch.zeros(1, 1))


MODEL_VARIANTS = [
    dict(local="gine", gate="elementwise", pe="rwse", pe_steps=8, pe_dim=4, pooling="add"),
    dict(local="gatedgcn", gate="headwise", pe="lappe", pe_steps=4, pe_dim=4, pooling="mean"),
    dict(local="none", gate="none", pe="none", pooling="mean"),
    dict(local="gine", gate="none", pe="rwse", pe_steps=8, pe_dim=4, pooling="norm", pool_norm=7.5),
]


def _trained_bn(model, batch):
    """Run a few train-mode passes so BatchNorm running stats are not the identity."""
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(batch)
    return model.eval()


@pytest.mark.parametrize("kw", MODEL_VARIANTS)
def test_model_permutation_equivariance_and_invariance(kw):
    torch.manual_seed(0)
    model = SigGateGT(2, dim=16, layers=2, heads=4, attn_dropout=0.0, **kw)
    g = random_graph(9, 1)
    _trained_bn(model, Batch.from_data_list([g, random_graph(5, 2)]))
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(3))
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(9)
    gp = Data(x=g.x[perm], edge_index=inv[g.edge_index], edge_attr=g.edge_attr, rwse=g.rwse[perm],
              lap_vec=g.lap_vec[perm], lap_val=g.lap_val[perm], y=g.y)
    out, det = model(Batch.from_data_list([g]), return_details=True)
    outp, detp = model(Batch.from_data_list([gp]), return_details=True)
    assert torch.allclose(out, outp, atol=1e-9)
    for h, hp in zip(det["hidden"], detp["hidden"]):
        assert torch.allclose(h[perm], hp, atol=1e-9)


@pytest.mark.parametrize("kw", MODEL_VARIANTS)
def test_prediction_alone_equals_prediction_in_batch(kw):
    torch.manual_seed(0)
    model = SigGateGT(1, dim=16, layers=3, heads=4, **kw)
    graphs = [random_graph(n, s) for s, n in enumerate([6, 13, 3, 21, 9])]
    _trained_bn(model, Batch.from_data_list(graphs))
    together = model(Batch.from_data_list(graphs))
    for i, g in enumerate(graphs):
        alone = model(Batch.from_data_list([g]))
        assert torch.allclose(alone, together[i : i + 1], atol=1e-9)
    # and a different batch composition
    shuffled = model(Batch.from_data_list(graphs[::-1]))
    assert torch.allclose(shuffled.flip(0), together, atol=1e-9)


def _built(seed, make):
    """``make()`` after ``torch.manual_seed(seed)``, and torch's random state after it."""
    torch.manual_seed(seed)
    module = make()
    return module, torch.random.get_rng_state()


@pytest.mark.parametrize("attn_type", ["full", "performer", "exphormer"])
def test_gated_and_ungated_share_non_gate_init(attn_type):
    """Built from one seed, a gated and an ungated module share every non-gate weight and leave
    the random stream where the other does: a researcher's paired ablation compares gates, not
    initialisations. Only siggate's own runs had it (they re-seed before reset_parameters());
    built directly, 29 of a model's tensors differed (the fused projection's default init drew
    as many numbers as it is wide, and a layer reset its gate before its feed-forward block)."""
    from siggate.nn import GatedGPSConv

    kw = {"attn_type": attn_type}
    makers = {
        "model": lambda gate: SigGateGT(1, dim=16, layers=2, gate=gate, **kw),
        "layer": lambda gate: GPSLayer(16, heads=2, gate=gate, **kw),
        "conv": lambda gate: GatedGPSConv(16, None, heads=2, gate=gate,
                                          attn_type="multihead" if attn_type == "full" else attn_type),
        "two layers": lambda gate: torch.nn.Sequential(GPSLayer(16, heads=2, gate=gate, **kw),
                                                       GPSLayer(16, heads=2, gate="none", **kw)),
    }
    for name, make in makers.items():
        (a, state_a), *gated = (_built(5, lambda: make(g)) for g in ("none", "elementwise", "headwise"))
        sa = a.state_dict()
        for b, state_b in gated:
            sb = b.state_dict()
            assert sa.keys() == sb.keys() and torch.equal(state_a, state_b), name
            for k, v in sa.items():
                other = sb[k][: v.size(0)] if k.endswith(("in_proj.weight", "in_proj.bias")) else sb[k]
                assert torch.equal(v, other), (name, k)
    # and the CLI's way (re-seeded, then reset_parameters()) too
    pair = []
    for gate in ("none", "elementwise"):
        torch.manual_seed(5)
        model = SigGateGT(1, dim=16, layers=2, gate=gate, **kw)
        torch.manual_seed(5)
        model.reset_parameters()
        pair.append(model.state_dict())
    for k, v in pair[0].items():
        assert torch.equal(v, pair[1][k][: v.size(0)] if k.endswith(("in_proj.weight", "in_proj.bias")) else pair[1][k])


def test_the_gate_weights_are_seeded_and_not_a_copy_of_the_next_draw():
    """The gate draws from its own generator: the same seed gives the same gate, another seed
    another one, and the gate is not the weights drawn after it (the global stream's next numbers)."""
    a, _ = _built(3, lambda: GatedMultiheadAttention(16, 4, gate="elementwise", gate_weight_std=1.0))
    b, _ = _built(3, lambda: GatedMultiheadAttention(16, 4, gate="elementwise", gate_weight_std=1.0))
    c, _ = _built(4, lambda: GatedMultiheadAttention(16, 4, gate="elementwise", gate_weight_std=1.0))
    gate = a.in_proj.weight[48:]
    assert torch.equal(gate, b.in_proj.weight[48:]) and not torch.equal(gate, c.in_proj.weight[48:])
    torch.manual_seed(3)
    GatedMultiheadAttention(16, 4, gate="elementwise", gate_weight_std=1.0)
    following = torch.randn(16, 16)
    assert not torch.allclose(gate, following) and abs(float(torch.corrcoef(
        torch.stack([gate.flatten(), following.flatten()]))[0, 1])) < 0.3
    # a model resets its gates one after another, nothing drawn between them: each layer's is its own
    for build in (lambda: SigGateGT(1, dim=16, layers=4, gate="elementwise"),):
        torch.manual_seed(0)
        model = build()
        for reseed in (False, True):  # as built, and as siggate's runs re-seed and reset it
            if reseed:
                torch.manual_seed(0)
                model.reset_parameters()
            gates = [a.in_proj.weight[3 * a.dim:] for a in model.attention_modules()]
            assert all(not torch.equal(gates[i], gates[j]) for i in range(4) for j in range(i))


def test_model_gradients_reach_every_gate():
    model = SigGateGT(1, dim=16, layers=3, gate="elementwise", pe="rwse", pe_steps=8, pe_dim=4)
    out = model(Batch.from_data_list([random_graph(7, 0), random_graph(4, 1)]))
    out.sum().backward()
    for att in model.attention_modules():
        assert att.in_proj.weight.grad[48:].abs().sum() > 0


def test_lappe_nan_padding_is_safe():
    model = SigGateGT(1, dim=16, layers=1, gate="elementwise", pe="lappe", pe_steps=4, pe_dim=4)
    out = model(Batch.from_data_list([random_graph(2, 0), random_graph(3, 1)]))
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_attention_probabilities_are_the_softmax_of_scaled_scores_by_hand():
    """One head's probabilities written out from the input projection: softmax(q k^T / sqrt(d_h))
    over the graph's own nodes (the test before checked only 1/sqrt(4) = 0.5)."""
    att = GatedMultiheadAttention(16, 4, gate="none").eval()
    x, mask = padded_input()
    _, det = att(x, mask, return_details=True)
    w, b = att.in_proj.weight, att.in_proj.bias
    for graph, head in ((0, 0), (1, 3)):
        n = int(mask[graph].sum())
        qkv = x[graph, :n] @ w.T + b  # [n, 3d]: q, k, v side by side, heads in order
        q, k = (qkv[:, part * 16 + head * 4: part * 16 + head * 4 + 4] for part in (0, 1))
        scores = [[float(sum(q[i, c] * k[j, c] for c in range(4))) / 2.0 for j in range(n)] for i in range(n)]
        by_hand = torch.tensor([[math.exp(s - max(row)) / sum(math.exp(t - max(row)) for t in row) for s in row]
                                for row in scores], dtype=det["attn"].dtype)
        assert torch.allclose(det["attn"][graph, head, :n, :n], by_hand, atol=1e-6)
        assert torch.all(det["attn"][graph, head, :n, n:] == 0)  # padding gets nothing


# ----------------------------------------------------------------------------- impl switch


def test_resolve_impl_auto_and_environment_override(monkeypatch, capsys):
    from siggate.nn import resolve_impl

    monkeypatch.delenv("SIGGATE_ATTN_IMPL", raising=False)
    assert resolve_impl("auto") == "packed" and resolve_impl("auto", padded=True) == "sdpa"
    for impl in ("reference", "sdpa", "packed"):
        assert resolve_impl(impl) == impl == resolve_impl(impl, padded=True)
        monkeypatch.setenv("SIGGATE_ATTN_IMPL", impl)
        assert resolve_impl("auto") == impl == resolve_impl("auto", padded=True)
        assert resolve_impl("sdpa") == "sdpa"  # an explicit choice wins
    from siggate.nn import make_attention

    batch, ei = torch.tensor([0, 0, 1]), torch.tensor([[0, 1], [1, 0]])
    monkeypatch.setenv("SIGGATE_ATTN_IMPL", "sdpa")
    for attn_type in ("performer", "exphormer"):  # (node rows only: they ran the reference under the name sdpa)
        attn = make_attention(attn_type, 8, 2)
        assert attn.make_layout(batch, ei, 2).impl == "reference"
        with pytest.raises(ValueError, match=r"^impl must be one of \('auto', 'reference', 'packed'\) for this "
                                             r"attention type, got 'sdpa'$"):
            attn.make_layout(batch, ei, 2, "sdpa")
    monkeypatch.setenv("SIGGATE_ATTN_IMPL", "flash")
    with pytest.raises(ValueError, match=r"\$SIGGATE_ATTN_IMPL='flash' is not an attention implementation; set it to "
                                         "one of auto, reference, sdpa, packed, or unset it"):
        resolve_impl("auto")
    # the command line names it before any work (every predicted row failed on it, train left its folder)
    from test_predict import run_cli

    rc, out, err = run_cli(["predict", "--checkpoint", "nowhere", "CCO"], capsys)
    assert rc == 2 and err == ("siggate predict: error: $SIGGATE_ATTN_IMPL='flash' is not an attention implementation; "
                               "set it to one of auto, reference, sdpa, packed, or unset it\n")
    assert run_cli(["data", "list"], capsys)[0] == 0  # (it runs no attention)
    with pytest.raises(ValueError, match="impl must be one of"):
        GatedMultiheadAttention(16, 4, impl="fused")
    with pytest.raises(ValueError, match="impl must be one of"):
        GPSLayer(16, 4, impl=True)


def test_environment_override_switches_the_model_to_reference(monkeypatch):
    """``SIGGATE_ATTN_IMPL=reference`` turns an ``impl="auto"`` model into the readable one."""
    torch.manual_seed(0)
    model = SigGateGT(1, dim=16, layers=2, heads=4, attn_dropout=0.0).train()
    b = Batch.from_data_list([random_graph(n, s) for s, n in enumerate([5, 9, 3])])
    calls = []
    model.layers[0].attn.register_forward_hook(lambda m, i, o: calls.append(i[0].dim()))
    fast = model(b)
    monkeypatch.setenv("SIGGATE_ATTN_IMPL", "reference")
    slow = model(b)
    assert calls == [3]  # the packed run never calls the padded forward; the reference run does
    assert torch.allclose(fast, slow, atol=1e-10)


def test_the_layout_carries_the_implementation():
    """The layout built at the entry decides what runs: a packed layer given a reference
    ``DenseIndex`` runs the padded reference (and equals its own packed run)."""
    from siggate.nn import DenseIndex, PackedLayout

    torch.manual_seed(0)
    layer = GPSLayer(16, 4, impl="packed").eval()
    x, e = torch.randn(4, 16), torch.randn(2, 16)
    ei, batch = torch.tensor([[0, 1], [1, 0]]), torch.zeros(4, dtype=torch.long)
    assert isinstance(layer.attn.make_layout(batch), PackedLayout) and layer.attn.make_layout(batch).impl == "packed"
    calls = []
    layer.attn.register_forward_hook(lambda m, i, o: calls.append(i[0].dim()))
    dense = DenseIndex.from_batch(batch)
    assert dense.impl == "reference"
    out = layer(x, ei, e, batch, dense)[0]
    assert calls == [3]
    assert torch.allclose(out, layer(x, ei, e, batch)[0], atol=1e-6)
    assert calls == [3]


def test_config_impl_and_old_fused_key():
    import dataclasses

    from siggate.config import AttentionConfig, ConfigError, from_dict, upgrade_config_dict

    # keys older configs lack, at their old meaning (the attention types' options: their defaults)
    added = {"pool_norm": 0.0, "mol_features": "none", "attention": dataclasses.asdict(AttentionConfig())}
    assert upgrade_config_dict({"model": {"fused": True}})["model"] == {"impl": "auto", **added}
    assert upgrade_config_dict({"model": {"fused": False, "dim": 8}})["model"] == {
        "impl": "reference", "dim": 8, **added}
    assert from_dict(upgrade_config_dict({"model": {"fused": False}})).model.impl == "reference"
    with pytest.raises(ConfigError, match="model.impl"):
        from_dict({"model": {"impl": "fast"}})


def test_mlp_head_halves_the_width():
    from siggate.nn import mlp_head

    head = mlp_head(64, 3, 2)
    assert [m.out_features for m in head if isinstance(m, torch.nn.Linear)] == [32, 16, 2]
    assert len(mlp_head(8, 1, 1)) == 1


def test_a_head_too_deep_for_the_width_is_refused():
    """dim=8 halves to 4, 2 and 1: four layers fit. A fifth had width 0 (``Linear(1, 0)``, then
    ``Linear(0, T)``), and the model predicted the output's bias for every graph, silently (the
    config refused it; the module a researcher builds did not)."""
    from siggate.nn import mlp_head

    kw = dict(dim=8, heads=2, layers=1, node_features="typed", num_node_types=3, num_edge_types=1)
    message = (r"^head_layers=5 is too many for dim=8: the prediction head halves the width at each layer, "
               r"so at most 4 layers fit; lower head_layers or raise dim$")
    with pytest.raises(ValueError, match=message):
        SigGateGT(1, head_layers=5, **kw)
    with pytest.raises(ValueError, match=message):
        mlp_head(8, 5, 1)
    with pytest.raises(ValueError, match=message):  # (a numpy width met an AttributeError in the message: bit_length)
        mlp_head(np.int64(8), np.int64(5), 1)
    with pytest.raises(ValueError, match=r"needs at least one layer \(its output Linear\), got 2\.0"):
        mlp_head(8, 2.0, 1)
    linear = lambda head: [m.out_features for m in head if isinstance(m, torch.nn.Linear)]  # noqa: E731
    assert linear(mlp_head(8, 5, 1, halve=False)) == [8, 8, 8, 8, 1]  # the node head keeps its width
    model = SigGateGT(1, head_layers=4, **kw).eval()  # the deepest that fits
    assert linear(model.head) == [4, 2, 1, 1]
    graphs = [Data(x=torch.tensor(t), edge_index=torch.tensor([[0, 1], [1, 0]]), edge_attr=torch.zeros(2, dtype=torch.long))
              for t in ([0, 1], [2, 2])]
    with torch.no_grad():
        assert model(Batch.from_data_list(graphs)).shape == (2, 1)


@pytest.mark.parametrize("attn_type", ["full", "performer", "exphormer"])
def test_readme_own_model_example_runs_on_the_fast_path(attn_type, monkeypatch):
    """The README's "use the layer in your own model" code, executed as written, for each
    attention type (it built a PackedLayout, which a Performer or Exphormer layer failed on)."""
    import pathlib
    import re

    from siggate.nn.impl import IMPL_ENV

    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text[text.index("## Use the layer in your own model"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    ns: dict = {}
    exec(code, ns)
    torch.manual_seed(0)
    model = ns["MyModel"](in_dim=3, edge_dim=2, dim=16, layers=2, attn_type=attn_type)
    graphs = [Data(x=torch.randn(n, 3), edge_index=torch.tensor([[0, 1], [1, 0]]), edge_attr=torch.randn(2, 2))
              for n in (4, 7, 2)]
    b = Batch.from_data_list(graphs)
    calls = []
    model.layers[0].attn.register_forward_hook(lambda m, i, o: calls.append(1))
    model(b).sum().backward()  # trains
    out = model.eval()(b)
    assert out.shape == (3, 1) and model.layers[0].attn.attn_type == attn_type
    assert not calls or attn_type != "full"  # the padded forward never ran: packed path
    monkeypatch.setenv(IMPL_ENV, "reference")  # the layout decides: the readable definition
    assert torch.allclose(model(b), out, atol=1e-5)
    assert calls or attn_type != "full"


def test_a_layout_of_another_attention_type_is_refused_by_name():
    """A Performer or Exphormer layer handed a PackedLayout (as the README's example once built
    for every type) failed deep inside with an AttributeError ('no attribute runs')."""
    from siggate.nn import GPSLayer, PackedLayout

    batch, ei = torch.tensor([0, 0, 1, 1, 1]), torch.tensor([[0, 2], [1, 3]])
    for attn_type in ("performer", "exphormer"):
        layer = GPSLayer(16, heads=2, attn_type=attn_type)
        with pytest.raises(ValueError, match=f"a PackedLayout is not a layout the '{attn_type}' attention reads; "
                                             r"build it with layer.attn.make_layout\(batch, edge_index, num_graphs\)"):
            layer(torch.randn(5, 16), ei, torch.randn(2, 16), batch, PackedLayout.from_batch(batch, 2))
    full = GPSLayer(16, heads=2)
    perf_layout = GPSLayer(16, heads=2, attn_type="performer").attn.make_layout(batch)
    with pytest.raises(ValueError, match="a GraphSegments is not a layout the 'full' attention reads"):
        full(torch.randn(5, 16), ei, torch.randn(2, 16), batch, perf_layout)


def test_pool_graphs_against_per_graph_loops():
    """add: each graph's sum; mean: its mean; norm: its sum over the constant (not its size)."""
    from siggate.nn.model import pool_graphs

    g = torch.Generator().manual_seed(0)
    x = torch.randn(10, 3, generator=g)
    batch = torch.tensor([0, 0, 0, 2, 2, 2, 2, 2, 3, 3])  # graph 1 is empty
    sums = torch.stack([x[batch == i].sum(0) for i in range(4)])
    means = torch.stack([x[batch == i].mean(0) if (batch == i).any() else torch.zeros(3) for i in range(4)])
    assert torch.allclose(pool_graphs(x, batch, 4, "add"), sums)
    assert torch.allclose(pool_graphs(x, batch, 4, "mean"), means)
    assert torch.allclose(pool_graphs(x, batch, 4, "norm", 2.5), sums / 2.5)
    # additive in the nodes: a graph's pooled vector is the sum of its halves' pooled vectors
    halves = pool_graphs(x[3:8], torch.tensor([0, 0, 1, 1, 1]), 2, "norm", 2.5)
    assert torch.allclose(halves.sum(0), pool_graphs(x, batch, 4, "norm", 2.5)[2])


def test_norm_pooling_model_is_the_add_model_with_a_scaled_head():
    """pooling="norm" with divisor c predicts what the add-pooled model predicts once its
    first head weight is divided by c; a divisor <= 0 is refused."""
    graphs = Batch.from_data_list([random_graph(n, s) for s, n in enumerate([6, 13, 3])])
    torch.manual_seed(0)
    add = SigGateGT(1, dim=16, layers=2, gate="none", pooling="add").eval()
    torch.manual_seed(0)
    norm = SigGateGT(1, dim=16, layers=2, gate="none", pooling="norm", pool_norm=4.0).eval()
    with torch.no_grad():
        add.head[0].weight.div_(4.0)
    assert torch.allclose(norm(graphs), add(graphs), atol=1e-12)
    with pytest.raises(ValueError, match="pool_norm must be > 0"):
        SigGateGT(1, dim=16, layers=2, pooling="norm", pool_norm=0.0)


@pytest.mark.parametrize("pool_norm, message", [
    (math.inf, r"^pool_norm must be > 0 and finite for pooling='norm' \(the divisor of each graph's sum, e\.g\. the "
               r"training graphs' mean size\), got inf$"),
    (math.nan, r"^pool_norm must be > 0 and finite for pooling='norm' .*, got nan$"),
    ("10", r"^pool_norm must be a number, got '10'$"),
])
def test_a_norm_pooling_divisor_that_is_no_finite_number_is_refused(pool_norm, message):
    """pool_norm=inf divided every graph's sum to 0: the model predicted one value for every graph,
    silently (the config refuses non-finite numbers; the module did not). A string met a comparison's
    TypeError naming no argument."""
    with pytest.raises(ValueError, match=message):
        SigGateGT(1, dim=16, layers=1, pooling="norm", pool_norm=pool_norm)
    graphs = Batch.from_data_list([random_graph(n, s) for s, n in enumerate([6, 13, 3])])
    torch.manual_seed(0)
    model = SigGateGT(1, dim=16, layers=1, pooling="norm", pool_norm=1e6).eval()  # large, finite: kept
    with torch.no_grad():
        g = model(graphs, return_details=True)[1]["graph_emb"]
        hidden = model(graphs, return_details=True)[1]["hidden"][-1]
    sums = torch.stack([hidden[graphs.batch == i].sum(0) for i in range(3)])
    assert torch.allclose(g, sums / 1e6, atol=1e-12) and g.abs().max() > 0


@pytest.mark.parametrize("ours, ogb_name, dims", [
    ("OGBAtomEncoder", "AtomEncoder", get_atom_feature_dims()),
    ("OGBBondEncoder", "BondEncoder", get_bond_feature_dims()),
])
def test_ogb_encoders_equal_ogbs_own(ours, ogb_name, dims):
    """Our embedding sums (written so that siggate.nn needs no ogb.graphproppred) build the same
    parameters from a seed as OGB's classes, load their state dicts and give the same outputs."""
    from ogb.graphproppred import mol_encoder

    from siggate.nn import encoders

    torch.manual_seed(3)
    mine = getattr(encoders, ours)(12)
    torch.manual_seed(3)
    ref = getattr(mol_encoder, ogb_name)(12)
    assert list(mine.state_dict()) == list(ref.state_dict())
    for (name, a), b in zip(mine.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), name
    g = torch.Generator().manual_seed(0)
    x = torch.stack([torch.randint(0, d, (40,), generator=g) for d in dims], dim=1)
    torch.testing.assert_close(mine(x), ref(x), rtol=0, atol=0)
    with torch.no_grad():  # different weights, loaded from OGB's module: same function
        for p in ref.parameters():
            p.normal_()
    mine.load_state_dict(ref.state_dict())
    torch.testing.assert_close(mine(x), ref(x), rtol=0, atol=0)
    before = [p.clone() for p in mine.parameters()]
    mine.reset_parameters()
    assert all(not torch.equal(a, b) for a, b in zip(before, mine.parameters()))


def test_import_nn_loads_no_sklearn_or_ogb_graphproppred():
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    probe = ("import sys, json, siggate.nn\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn' "
             "or m.startswith('ogb.graphproppred'))))")
    src = str(Path(__file__).resolve().parents[1] / "src")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": src})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("pe", ["rwse", "lappe"])
def test_dense_model_runs_in_float64_as_in_float32(pe):
    """``model.double()`` with dense node features crashed in every forward (the encoder cast
    its input to float32, as did the stored positional encodings); the float64 model now
    computes what the float32 one does, for inputs stored in either dtype."""
    torch.manual_seed(0)
    m32 = SigGateGT(1, dim=16, layers=2, heads=4, node_features="dense", num_node_features=6, num_edge_types=1, pe=pe,
                    pe_steps=8 if pe == "rwse" else 4, pe_dim=4).float().eval()  # (the module's default is float64)
    m64 = copy.deepcopy(m32).double()
    graphs = []
    for n, seed in ((9, 1), (3, 2)):
        g = random_graph(n, seed)
        g.x = torch.randn(n, 6, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)
        g.rwse, g.lap_vec, g.lap_val = g.rwse.float(), g.lap_vec.float(), g.lap_val.float()  # as datasets store them
        del g.edge_attr
        graphs.append(g)
    b = Batch.from_data_list(graphs)
    out32 = m32(b)
    out64 = m64(b)
    assert out64.dtype == torch.float64 and torch.allclose(out64.float(), out32, atol=1e-5)
    b.x = b.x.double()
    assert torch.equal(m64(b), out64)


def test_a_graph_without_nodes_leaves_the_reference_gradients_finite():
    """The readable reference masked padded keys with -inf: a padded row with no real key (a
    graph of no nodes in the batch, or a padded sample with none) became NaN, and so did every
    gradient of the projections, while the fast path's were finite."""
    torch.manual_seed(0)
    attn = GatedMultiheadAttention(8, 2)
    x, mask = torch.randn(2, 3, 8), torch.tensor([[True, True, True], [False, False, False]])
    grads = {}
    for impl in ("reference", "sdpa"):
        attn.zero_grad()
        (attn(x, mask, impl=impl) * mask[..., None]).sum().backward()
        grads[impl] = [p.grad.clone() for p in attn.parameters()]
        assert all(torch.isfinite(g).all() for g in grads[impl]), impl
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*grads.values()))
    model = SigGateGT(1, dim=16, layers=1, impl="reference")
    empty = random_graph(4, 2)
    empty = Data(x=empty.x[:0], edge_index=empty.edge_index[:, :0], edge_attr=empty.edge_attr[:0],
                 rwse=empty.rwse[:0], lap_vec=empty.lap_vec[:0], lap_val=empty.lap_val[:0], y=empty.y)
    model(Batch.from_data_list([random_graph(5, 0), empty, random_graph(4, 1)])).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_a_trainable_bias_of_a_frozen_projection_gets_its_gradient_on_the_fast_path():
    """BitFit-style fine-tuning (weights frozen, biases trained) on raw inputs: the fast path
    took the no-grad branch (it looked at the input and the weight only) and failed with
    'bmm(): functions with out=... arguments don't support automatic differentiation'."""
    grads = {}
    for impl in ("packed", "reference"):
        torch.manual_seed(0)
        attn = GatedMultiheadAttention(16, 4).train()
        attn.in_proj.weight.requires_grad_(False)
        batch = torch.tensor([0, 0, 0, 1, 1])
        attn.forward_nodes(torch.randn(5, 16), attn.make_layout(batch, impl=impl)).sum().backward()
        grads[impl] = attn.in_proj.bias.grad
    assert grads["packed"] is not None and torch.allclose(grads["packed"], grads["reference"], atol=1e-5)


def test_a_second_derivative_through_the_fast_kernels_is_refused_by_name():
    """A gradient penalty through the hand-written backwards failed with 'bmm(): functions with
    out=...' or 'modified by an inplace operation'; the kernels say they differentiate once."""
    batch, ei = torch.tensor([0, 0, 0, 1, 1]), torch.tensor([[0, 1, 3], [1, 2, 4]])
    for attn_type in ("full", "performer", "exphormer"):
        torch.manual_seed(0)
        layer = GPSLayer(8, heads=2, attn_type=attn_type).train()
        x = torch.randn(5, 8, requires_grad=True)
        y, _ = layer(x, ei, torch.randn(3, 8), batch)
        (g,) = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
        with pytest.raises(RuntimeError, match="marked with @once_differentiable"):
            g.sum().backward()
    ref = GPSLayer(8, heads=2, impl="reference").train()  # the readable definition differentiates twice
    x = torch.randn(5, 8, requires_grad=True)
    (g,) = torch.autograd.grad(ref(x, ei, torch.randn(3, 8), batch)[0].pow(2).sum(), x, create_graph=True)
    g.sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("make, message", [
    (lambda: GatedMultiheadAttention(16, 0), r"heads must be a whole number >= 1, got 0"),
    (lambda: GatedMultiheadAttention(16, -4), r"heads must be a whole number >= 1, got -4"),
    (lambda: GatedMultiheadAttention(16, 4, gate="headwise", gate_bias_init=5.0, bias=False),
     r"gate_bias_init=5.0 needs the projections' biases"),
    (lambda: GPSLayer(16, dropout=-0.5), r"dropout must be in \[0, 1\), got -0.5"),
    (lambda: GPSLayer(16, dropout=1.5), r"dropout must be in \[0, 1\), got 1.5"),
    (lambda: SigGateGT(1, dim=16, head_layers=0, mol_features_dim=3), "a prediction head needs at least one layer"),
    (lambda: SigGateGT(1, dim=16, node_features="dense"), "node_features='dense' needs num_node_features > 0"),
    (lambda: SigGateGT(1, dim=16, node_features="dense", num_node_features=3),
     r"num_edge_types \(node_features='dense', edge_attr; 1 for graphs without edge features\): the number of "
     r"types must be a whole number >= 1, got 0"),
    (lambda: SigGateGT(1, dim=16, node_features="typed", num_edge_types=1), r"num_node_types .* >= 1, got 0"),
    (lambda: SigGateGT(1, dim=16, layers=-1), r"layers must be a whole number >= 0, got -1"),
    (lambda: SigGateGT(0, dim=16), r"num_tasks must be a whole number >= 1, got 0"),
    (lambda: GatedMultiheadAttention(0, 1), r"dim must be a whole number >= 1, got 0"),
    (lambda: GatedMultiheadAttention(16, 4, gate_bias_init=math.nan), r"gate_bias_init must be a finite number"),
    (lambda: GatedMultiheadAttention(16, 4, gate_weight_std=-1.0), r"gate_weight_std must be a finite number >= 0"),
    (lambda: GPSLayer(16, ffn_dim=0), r"ffn_dim must be a whole number >= 1, got 0"),
    (lambda: GPSLayer(16, attn_type="performer", attn_kwargs={"num_features": 8.5}),
     r"num_features must be a whole number >= 1, got 8.5"),
    (lambda: GPSLayer(16, attn_type="exphormer", attn_kwargs={"num_virtual_nodes": 1.5}),
     r"num_virtual_nodes must be a whole number >= 0, got 1.5"),
])
def test_constructor_arguments_that_cannot_work_are_refused_when_built(make, message):
    """Each was accepted and failed later (a ZeroDivisionError, a shape error at the first
    forward), silently ran without dropout (-0.5), ignored the gate bias (a constant gate of 0.5
    instead of sigmoid(5)), built a head that could not take the molecule features, built encoders of
    zero types that failed at the first forward, NaN gates, a layer without its FFN, a model of
    no layers, or met a float count as a TypeError."""
    with pytest.raises(ValueError, match=message):
        make()
    GatedMultiheadAttention(16, 4, gate="none", bias=False)  # no gate, no gate bias: fine
    GatedMultiheadAttention(16, 4, gate="headwise", bias=False)


@pytest.mark.parametrize("kwargs, message", [
    (dict(dim=8.0), r"^dim must be a whole number >= 1, got 8\.0$"),
    (dict(dim=16, mol_features_dim=2.5), r"^mol_features_dim must be a whole number >= 0, got 2\.5$"),
    (dict(dim=16, mol_features_dim=-1), r"^mol_features_dim must be a whole number >= 0, got -1$"),
    (dict(dim=16, layers=0, impl="fast"),
     r"^impl must be one of \('auto', 'reference', 'sdpa', 'packed'\), got 'fast'$"),
])
def test_the_model_refuses_its_own_arguments_where_given(kwargs, message):
    """``SigGateGT(dim=8.0)`` failed inside the encoders' embedding tables with torch's words
    ("empty(): argument 'size' failed to unpack..."), ``mol_features_dim=2.5`` built a head of 2
    feature columns, silently, and a misspelt ``impl`` was kept by a model without layers (only the
    layers checked it)."""
    with pytest.raises(ValueError, match=message):
        SigGateGT(1, heads=2, node_features="typed", num_node_types=3, num_edge_types=1, **kwargs)
    model = SigGateGT(1, dim=16, heads=2, layers=0, mol_features_dim=2, node_features="typed", num_node_types=3,
                      num_edge_types=1)
    assert model.head[0].in_features == 16 + 2 and model.mol_mean.shape == (2,)


@pytest.mark.parametrize("make, message", [
    (lambda: GatedMultiheadAttention(16, 4, attn_dropout="0.1"), r"^attn_dropout must be a number, got '0\.1'$"),
    (lambda: GatedMultiheadAttention(16, 4, gate_bias_init=None), r"^gate_bias_init must be a number, got None$"),
    (lambda: GatedMultiheadAttention(16, 4, gate_weight_std="0.02"),
     r"^gate_weight_std must be a number or None, got '0\.02'$"),
    (lambda: GPSLayer(16, dropout="0.1"), r"^dropout must be a number, got '0\.1'$"),
    (lambda: SigGateGT(1, dim=16, attn_type="performer", attn_dropout=None), r"^attn_dropout must be a number, got None$"),
])
def test_a_rate_or_an_initial_value_that_is_no_number_is_refused_by_name(make, message):
    """A string or None (a value read from a file, a forgotten default) met a comparison inside the
    constructor: "TypeError: '<=' not supported between instances of 'float' and 'str'", naming no
    argument. Numbers of any kind still build, and NumPy's too."""
    import numpy as np

    with pytest.raises(ValueError, match=message):
        make()
    att = GatedMultiheadAttention(16, 4, attn_dropout=np.float32(0.25), gate_bias_init=1, gate_weight_std=0)
    assert att.attn_dropout == 0.25 and att.gate_bias_init == 1.0
    assert torch.equal(att.in_proj.weight[48:], torch.zeros(16, 16))  # std 0: the gate starts constant
    assert torch.equal(att.in_proj.bias[48:], torch.ones(16))
    assert GPSLayer(16, dropout=0).dropout == 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(pe="rwse", pe_steps=4, pe_dim=4.0), r"^pe_dim must be a whole number in \(0, dim=8\) when pe='rwse', got 4\.0$"),
    (dict(pe="lappe", pe_steps=4, pe_dim="4"), r"^pe_dim must be a whole number in \(0, dim=8\) when pe='lappe', got '4'$"),
    (dict(node_features="dense", num_node_features=3.0, num_edge_types=1),
     r"^node_features='dense' needs num_node_features > 0 \(the float columns of x\), a whole number, got 3\.0$"),
])
def test_encoder_widths_that_are_no_whole_numbers_are_refused_by_name(kwargs, message):
    """pe_dim=4.0 and num_node_features=3.0 reached torch's embedding and linear layers and failed
    there ("empty(): argument 'size' failed to unpack the object ..."), pe_dim='4' met a comparison's
    TypeError: none named the argument. The widths the encoders build are still dim - pe_dim and pe_dim."""
    with pytest.raises(ValueError, match=message):
        SigGateGT(1, dim=8, heads=2, layers=1, **kwargs)
    model = SigGateGT(1, dim=8, heads=2, layers=1, pe="rwse", pe_steps=4, pe_dim=3)
    widths = {m.embedding_dim for m in model.node_encoder.atom.modules() if isinstance(m, torch.nn.Embedding)}
    assert widths == {5} and model.node_encoder.pe.lin.out_features == 3
    dense = SigGateGT(1, dim=8, heads=2, layers=1, node_features="dense", num_node_features=3, num_edge_types=1)
    assert dense.node_encoder.atom.lin.in_features == 3 and dense.node_encoder.atom.lin.out_features == 8


def test_inputs_a_layer_would_misread_are_refused():
    """A type encoder took the first of several columns and dropped the rest, and a GINE layer
    added an ``[E, 1]`` edge column to every channel: both silently. Now each is refused by name,
    on the reference and the fast path, while the documented shapes still run."""
    from siggate.nn import TypeEncoder

    enc = TypeEncoder(4, 8, "num_edge_types")
    assert torch.equal(enc(torch.tensor([[1], [3]])), enc(torch.tensor([1, 3])))
    for bad in (torch.tensor([[1, 2], [3, 0]]), torch.tensor([[0.0, 1.0, 0.0, 0.0]])):
        with pytest.raises(ValueError, match=r"num_edge_types: expected one integer type per row, \[N\] or \[N, 1\]"):
            enc(bad)
    x, ei = torch.randn(4, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])
    for impl in ("reference", "packed"):
        layer = GPSLayer(8, heads=2, impl=impl).eval()
        layer(x, ei, torch.randn(3, 8))
        with pytest.raises(ValueError, match=r"edge_attr must be \[E, d\] = \[3, 8\].*got \[3, 1\]"):
            layer(x, ei, torch.randn(3, 1))
        with pytest.raises(ValueError, match=r"edge_attr must be \[E, d\]"):
            layer.for_inference()(x, ei, torch.randn(3, 1))
    for attn_type in ("full", "performer", "exphormer"):  # a layout kept from another batch: an IndexError deep inside
        for impl in ("reference", "packed"):
            layer = GPSLayer(8, heads=2, attn_type=attn_type, impl=impl).eval()
            seven = layer.attn.make_layout(torch.zeros(7, dtype=torch.long), torch.tensor([[0, 1], [1, 2]]), impl=impl)
            with pytest.raises(ValueError, match="the layout was built for a batch of 7 nodes, and x has 4 rows"):
                layer(x, ei, torch.randn(3, 8), layout=seven)


@pytest.mark.parametrize("attn_type", ["full", "performer", "exphormer"])
def test_a_batch_without_nodes_gives_no_rows(attn_type):
    """A batch whose graphs have no nodes failed in a gated layer ('cannot reshape tensor of 0
    elements', the gate's view(..., -1)); ungated it gave [0, d]. Both now give [0, d]."""
    for gate in ("elementwise", "headwise", "none"):
        layer = GPSLayer(8, heads=2, attn_type=attn_type, gate=gate).eval()
        out, _ = layer(torch.zeros(0, 8), torch.empty(2, 0, dtype=torch.long), torch.zeros(0, 8),
                       torch.empty(0, dtype=torch.long))
        assert out.shape == (0, 8)


def test_performer_fast_path_trains_under_autocast():
    """Under autocast q, k and v arrive in bfloat16 while the random features stay float32; the
    fast path's backward (outside autocast) multiplied the two and failed for graphs of BIG_GRAPH
    nodes or more. Its gradients now match float32's to bfloat16's precision."""
    from siggate.nn.kernels.linear_attention import BIG_GRAPH

    n = BIG_GRAPH + 6
    torch.manual_seed(0)
    layer = GPSLayer(16, heads=4, attn_type="performer", local="none").float()  # (this module's default: float64)
    x, ei = torch.randn(n, 16, dtype=torch.float32), torch.stack([torch.arange(n - 1), torch.arange(1, n)])
    grads = []
    for autocast in (False, True):
        layer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out, _ = layer(x, ei, None)
        out.float().pow(2).sum().backward()
        grads.append(layer.attn.in_proj.weight.grad.clone())
    exact, low = grads
    assert torch.isfinite(low).all()
    assert ((low - exact).norm() / exact.norm()).item() < 0.05


def test_ogb_features_without_bond_features_or_of_another_width_are_named():
    """A graph of OGB atom features without edge_attr reached the bond encoder as a 1-D zero
    vector (IndexError: tuple index out of range); features of another width, an IndexError
    from inside the embedding loop."""
    from siggate.nn.encoders import OGBAtomEncoder
    from siggate.nn.model import SigGateGT

    model = SigGateGT(1, dim=8, layers=1, heads=2).eval()
    data = Data(x=torch.zeros(3, 9, dtype=torch.long), edge_index=torch.tensor([[0, 1], [1, 2]]))
    with pytest.raises(ValueError, match=r"node_features='ogb' reads OGB's bond features: give data.edge_attr \[E, 3\]"):
        model(data)
    data.edge_attr = torch.zeros(2, 3, dtype=torch.long)
    assert model(data).shape == (1, 1)
    with pytest.raises(ValueError, match=r"OGBAtomEncoder reads \[rows, 9\] integer features .* got shape \(3, 5\)"):
        OGBAtomEncoder(8)(torch.zeros(3, 5, dtype=torch.long))


def test_layer_arguments_are_refused_where_given_and_an_empty_batch_attends_to_nothing():
    """A reader's hunt: GPSLayer(8.0) raised a torch TypeError from its local branch; attn=False
    ignored a misspelt attn_kwargs key; expander_seed=0.5 was truncated to 0 and 2**70 drew seed
    0's expanders; pe_steps=0 with pe='rwse' built an encoder of no input; a batch of no node
    failed to reshape in the padded kernels (reference, sdpa)."""
    from siggate.nn.attention_types import make_attention
    from siggate.nn.encoders import NodeEncoder
    from siggate.nn.exphormer import GatedExphormerAttention
    from siggate.nn.layer import GPSLayer

    with pytest.raises(ValueError, match=r"dim must be a whole number >= 1, got 8.0"):
        GPSLayer(8.0)
    with pytest.raises(ValueError, match=r"attn_kwargs \['bogus'\] are not options of attn_type 'full'"):
        GPSLayer(8, heads=2, attn=False, attn_kwargs={"bogus": 1})
    GPSLayer(8, heads=2, attn=False, attn_type="performer", attn_kwargs={"num_features": 4})  # its own options: fine
    with pytest.raises(ValueError, match=r"expander_seed must be a whole number >= 0, got 0.5"):
        GatedExphormerAttention(8, 2, expander_seed=0.5)
    with pytest.raises(ValueError, match=r"expander_seed must be below 2\*\*63"):
        GatedExphormerAttention(8, 2, expander_seed=2**70)
    with pytest.raises(ValueError, match=r"pe_steps \(the random-walk steps of pe='rwse'\) must be a whole number >= 1"):
        NodeEncoder("ogb", 16, pe="rwse", pe_steps=0, pe_dim=4)
    for impl in ("reference", "sdpa", "packed"):
        attn = make_attention("full", 8, 2, impl=impl).eval()
        layout = attn.make_layout(torch.zeros(0, dtype=torch.long), torch.zeros(2, 0, dtype=torch.long), 2, impl, False)
        assert attn.forward_nodes(torch.zeros(0, 8), layout).shape == (0, 8)


@pytest.mark.parametrize("attn_type", ["full", "performer", "exphormer"])
def test_inputs_the_layer_would_misread_are_refused_in_one_line(attn_type):
    """A researcher's inputs that ran wrong or failed deep inside (helper-163): a float 0/1 mask
    on the padded attention's default path was SDPA's additive bias (nothing masked: 0.14 off, in
    silence); edge_attr=None with a local model that reads edges, and num_graphs below the batch's
    graph count, failed in torch's words; an int32 batch failed in Performer's scatter. The first
    three are refused naming the fix; an int32 batch gives the long batch's numbers."""
    torch.manual_seed(0)
    if attn_type == "full":
        attn = GatedMultiheadAttention(16, 4).eval()
        x = torch.randn(2, 6, 16)
        mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
        assert torch.allclose(attn(x, mask.bool())[0, :3], attn(x[:1, :3])[0], atol=1e-6)
        for bad in (mask.float(), mask, mask.bool()[:, :5]):
            with pytest.raises(ValueError, match=r"^mask must be a bool tensor of shape \(B, N\) = \(2, 6\), True for "
                                                 r"real nodes; got torch\.\w+ of shape \(2, \d\) \(mask\.bool\(\) "
                                                 r"converts a 0/1 one\)$"):
                attn(x, bad)
    x, batch = torch.randn(8, 16), torch.tensor([0] * 5 + [1] * 3)
    ei, e = torch.tensor([[0, 1, 2, 3, 5, 6], [1, 2, 3, 4, 6, 7]]), torch.randn(6, 16)
    layer = GPSLayer(16, 4, attn_type=attn_type).eval()
    with pytest.raises(ValueError, match=r"^num_graphs=1, but batch holds graph 1: give at least batch\.max\(\) \+ 1 = "
                                         r"2, or None to count them$"):
        layer.attn.make_layout(batch, ei, num_graphs=1)
    from siggate.nn.kernels.layout import DenseIndex, GraphSegments, PackedLayout

    for build in (DenseIndex.from_batch, GraphSegments.from_batch, PackedLayout.from_batch):  # (each layout's own count)
        with pytest.raises(ValueError, match=r"^num_graphs=1, but batch holds graph 1"):
            build(batch, 1)
        grown = build(batch, 3)  # (a graph of no node: allowed, as PyG's pools allow it)
        assert getattr(grown, "num_graphs", None) == 3 or getattr(grown, "batch_size", None) == 3 or \
            sum(g for g, _ in grown.groups) == 2  # (the packed layout groups the graphs that have nodes)
    for module in (layer, layer.for_inference()):  # (the folded layer too)
        with pytest.raises(ValueError, match=r"^local='gine' reads edge features: give edge_attr \[E, d\] = \[6, 16\]"):
            module(x, ei, None, batch)
    assert torch.equal(layer(x, ei, e, batch.int())[0], layer(x, ei, e, batch)[0])
    # weights edited through .data (older EMA or pruning code) bump no version: for_inference() handed
    # back the snapshot folded before them (3.08 off); it folds again
    layer.for_inference()
    layer.ff2.weight.data.mul_(3.0)
    layer.norm_attn.running_var.data.fill_(4.0)
    assert torch.allclose(layer.for_inference()(x, ei, e, batch)[0], layer(x, ei, e, batch)[0], atol=1e-5)
