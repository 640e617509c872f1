"""The optimized paths of siggate.nn pinned to the readable one, and a `siggate bench` smoke test.

The readable path is the model built with ``impl="reference"`` (padded ``(B, N_max, d)`` batch,
``q k^T``/mask/softmax spelled out, plain autograd); the fast path (``impl="packed"``) uses the
size-grouped packed layout and the hand-written attention/GINE/FFN backwards; the inference
transform ``for_inference()`` (BatchNorm folding) is pinned to the model in eval. Everything here runs in float64 with explicit dtypes.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
from torch_geometric.data import Batch, Data

import siggate.nn.kernels.attention_cpu as K
import siggate.nn.kernels.layout as L
from siggate.nn import GINELocal, GPSLayer, PackedLayout, SigGateGT
from siggate.nn.kernels.fused_blocks import GINEResidual, MLPResidual
from siggate.nn.kernels.packed import packed_core, sdpa_groups

DT = torch.float64
SIZES = [6, 13, 3, 21, 9, 13, 1, 5, 21]  # padding, repeated sizes, a one-node graph


def graph(n: int, seed: int) -> Data:
    g = torch.Generator().manual_seed(seed)
    src = torch.arange(n - 1)
    ei = torch.cat([torch.stack([src, src + 1]), torch.randint(0, n, (2, n // 2), generator=g)], 1)
    ei = ei[:, ei[0] != ei[1]]
    ei = torch.cat([ei, ei.flip(0)], 1)
    x = torch.stack([torch.randint(0, k, (n,), generator=g) for k in get_atom_feature_dims()], 1)
    ea = torch.stack([torch.randint(0, k, (ei.size(1),), generator=g) for k in get_bond_feature_dims()], 1)
    lv = torch.randn(n, 4, generator=g, dtype=DT)
    ll = torch.rand(n, 4, generator=g, dtype=DT)
    if n < 4:
        lv[:, n:] = float("nan")
        ll[:, n:] = float("nan")
    return Data(x=x, edge_index=ei, edge_attr=ea, rwse=torch.rand(n, 8, generator=g, dtype=DT), lap_vec=lv,
                lap_val=ll, y=torch.zeros(1, 2, dtype=DT))


def batch(sizes=SIZES) -> Batch:
    return Batch.from_data_list([graph(n, s) for s, n in enumerate(sizes)])


def batch_as(b: Batch, dtype: torch.dtype) -> Batch:
    """A copy of ``b`` with every floating tensor (features, encodings, targets) in ``dtype``: the
    input of a model in that dtype (PyG's ``apply`` changes the batch itself, so it copies first)."""
    return b.clone().apply(lambda t: t.to(dtype) if t.is_floating_point() else t)


def twin_models(seed=0, impl="packed", **kw):
    torch.manual_seed(seed)
    fast = SigGateGT(2, dim=16, layers=2, heads=4, attn_dropout=0.0, impl=impl, **kw).to(DT)
    torch.manual_seed(seed)
    slow = SigGateGT(2, dim=16, layers=2, heads=4, attn_dropout=0.0, impl="reference", **kw).to(DT)
    return fast, slow


def training_step_errors(fast, slow, b, fast_batch=None, seed=None) -> dict:
    """One training step of both models (``fast`` on ``fast_batch``, default ``b``; with ``seed``,
    each forward starts from it, for random draws in training such as LapPE's sign flips): the
    max absolute difference of the outputs (``out``) and of each parameter's gradient (``grads``,
    by name, compared on the CPU), and the parameters that have a gradient in one model only
    (``grad_presence``), and ``scale``: the largest of 1 and ``slow``'s absolute outputs and
    gradients (the scale of a lower precision's tolerance). ``benchmarks/gpu_check.py`` runs it
    with ``fast`` on a GPU."""
    fast.train()
    slow.train()

    def forward(model, x):
        if seed is not None:
            torch.manual_seed(seed)
        return model(x)

    o1, o2 = forward(fast, b if fast_batch is None else fast_batch), forward(slow, b)
    (o1**2).sum().backward()
    (o2**2).sum().backward()
    grads, presence = {}, []
    for (name, p1), p2 in zip(fast.named_parameters(), slow.parameters()):
        if (p1.grad is None) != (p2.grad is None):
            presence.append(name)
        elif p1.grad is not None:
            grads[name] = float((p1.grad.detach().cpu().to(p2.grad.dtype) - p2.grad).abs().max())
    out = float((o1.detach().cpu().to(o2.dtype) - o2.detach()).abs().max())
    scale = max([1.0, float(o2.detach().abs().max())]
                + [float(p.grad.abs().max()) for p in slow.parameters() if p.grad is not None])
    return {"out": out, "grads": grads, "grad_presence": presence, "scale": scale}


def assert_same_training_step(fast, slow, b, atol=1e-10, seed=None):
    e = training_step_errors(fast, slow, b, seed=seed)
    assert e["out"] <= atol and not e["grad_presence"], e
    assert all(v <= atol for v in e["grads"].values()), {k: v for k, v in e["grads"].items() if v > atol}


@pytest.fixture
def groups(request, monkeypatch):
    """``many``: one group per distinct size; ``one``: a single padded group;
    ``chunked``: default grouping, every group through the chunked kernel."""
    if request.param == "many":
        monkeypatch.setattr(L, "GROUP_CALL_COST", 0.0)
    elif request.param == "one":
        monkeypatch.setattr(L, "GROUP_CALL_COST", 1e12)
    elif request.param == "chunked":
        monkeypatch.setattr(K, "CHUNKED_MIN_NODES", 1)
        monkeypatch.setattr(K, "CHUNK_ROWS", 4)
    return request.param


@pytest.mark.parametrize("groups", ["default", "many", "one", "chunked"], indirect=True)
@pytest.mark.parametrize("gate", ["none", "headwise", "elementwise"])
@pytest.mark.parametrize("position", ["output", "value", "post"])
def test_training_step_fast_equals_readable(gate, position, groups):
    fast, slow = twin_models(gate=gate, gate_position=position, local="gine", pe="rwse", pe_steps=8, pe_dim=4)
    assert_same_training_step(fast, slow, batch())


@pytest.mark.parametrize("gate", ["none", "headwise", "elementwise"])
@pytest.mark.parametrize("position", ["output", "value", "post"])
def test_training_step_sdpa_equals_readable(gate, position):
    """``impl="sdpa"`` (padded batch, ``scaled_dot_product_attention``) for the whole model."""
    fast, slow = twin_models(impl="sdpa", gate=gate, gate_position=position, local="gine", pe="rwse", pe_steps=8,
                             pe_dim=4)
    assert_same_training_step(fast, slow, batch())


@pytest.mark.parametrize("groups", ["default", "many"], indirect=True)
@pytest.mark.parametrize("kw", [
    dict(local="gatedgcn", gate="headwise", pe="lappe", pe_steps=4, pe_dim=4, pooling="mean"),
    dict(local="none", gate="elementwise"),
    dict(local="gine", gate="none", pooling="mean", head_layers=1),
])
def test_training_step_other_models(kw, groups):
    torch.manual_seed(1)  # LapPE flips signs at random in training: same draws for both
    fast, slow = twin_models(**kw)
    assert_same_training_step(fast, slow, batch(), seed=3)


def random_running_stats(model, seed=0):
    """Random BatchNorm statistics and affine maps, so that folding them has something to fold.
    The scales stay positive and the shifts small: with N(0, 1) ones every unit of a ReLU can
    end up negative for every graph, and the model's output is then one constant
    (:func:`output_spread` guards against that)."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g, dtype=DT))
            m.running_var.copy_(torch.rand(m.num_features, generator=g, dtype=DT) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g, dtype=DT) + 0.5)
            m.bias.data.copy_(0.1 * torch.randn(m.num_features, generator=g, dtype=DT))


def output_spread(out: torch.Tensor) -> float:
    """The smallest standard deviation over graphs of any output column: 0 when some output
    ignores its input, which would let any comparison of two models' outputs pass."""
    return float(out.detach().std(0).min())


@pytest.mark.parametrize("groups", ["default", "many", "chunked"], indirect=True)
@pytest.mark.parametrize("kw", [
    dict(local="gine", gate="elementwise"),
    dict(local="gine", gate="headwise", gate_position="post"),
    dict(local="gine", gate="none", gate_position="value"),
    dict(local="gatedgcn", gate="elementwise"),
    dict(local="none", gate="headwise"),
])
def test_inference_fast_equals_readable(kw, groups):
    """Eval: batched-matmul/flash attention, and ``for_inference()`` (BatchNorms folded
    into the linear maps) against the readable model in eval."""
    fast, slow = twin_models(**kw)
    for m in (fast, slow):
        random_running_stats(m)
        m.eval()
    b = batch()
    with torch.no_grad():
        assert output_spread(slow(b)) > 1e-3
        assert torch.allclose(fast(b), slow(b), atol=1e-10, rtol=0)
        assert torch.allclose(fast.for_inference()(b), slow(b), atol=1e-10, rtol=0)
        for m in (fast, slow):  # a new transform follows changes of the statistics
            for layer in m.layers:
                layer.norm_ff.running_mean.add_(0.5)
                layer.norm_attn.running_var.mul_(2.0)
        assert torch.allclose(fast.for_inference()(b), slow(b), atol=1e-10, rtol=0)
    with torch.inference_mode():
        assert torch.allclose(fast.for_inference()(b), slow(b), atol=1e-10, rtol=0)
        assert torch.allclose(fast(b), slow(b), atol=1e-10, rtol=0)
    # eval with gradients on (e.g. saliency) takes the unfolded fast path
    x1, x2 = fast(b), slow(b)
    assert torch.allclose(x1, x2, atol=1e-10, rtol=0)


def test_for_inference_folds_again_only_after_a_change():
    """``for_inference()`` per batch folds once per change of the weights: the same folded
    layers while nothing changed; new ones, equal to the model in eval, after an optimizer
    step, a training forward (running statistics), ``load_state_dict`` or a dtype change."""
    fast, slow = twin_models(gate="elementwise")
    b = batch()
    for m in (fast, slow):
        random_running_stats(m)
    fast.eval()
    first = fast.for_inference()
    assert all(a is c for a, c in zip(first.layers, fast.for_inference().layers))

    def changed(check_equal=True, layers=(0, 1)):
        folded = fast.for_inference()
        assert [i for i, (a, c) in enumerate(zip(first.layers, folded.layers)) if a is not c] == list(layers)
        if check_equal:
            slow.load_state_dict(fast.state_dict())
            slow.eval()
            with torch.no_grad():
                assert torch.allclose(folded(b), slow(b), atol=1e-10, rtol=0)
        return folded

    opt = torch.optim.SGD(fast.parameters(), lr=0.1)
    fast.train()
    fast(b).sum().backward()  # a training forward moves the running statistics, the step the weights
    opt.step()
    first = changed()
    with torch.no_grad():
        fast.layers[0].ff2.weight.mul_(2.0)
    first = changed(layers=[0])  # layer 1 is unchanged: its folded form is reused
    fast.load_state_dict({k: v.clone() for k, v in fast.state_dict().items()})
    first = changed()
    fast.to(torch.float32)
    changed(check_equal=False)
    with torch.inference_mode():  # inference tensors have no version: never reused
        inf = SigGateGT(2, dim=16, layers=1, heads=4).eval()
        assert inf.for_inference().layers[0] is not inf.for_inference().layers[0]


def test_headwise_gate_with_unaligned_projection():
    """d = 32, H = 4: the projection width 3d + H is not a multiple of d_head (the
    ZINC/Peptides case); the q/k/v columns take the copy path."""
    torch.manual_seed(0)
    fast = SigGateGT(1, dim=32, layers=2, heads=4, gate="headwise", attn_dropout=0.0, impl="packed").to(DT)
    torch.manual_seed(0)
    slow = SigGateGT(1, dim=32, layers=2, heads=4, gate="headwise", attn_dropout=0.0, impl="reference").to(DT)
    assert_same_training_step(fast, slow, batch())


def test_gps_layer_alone_builds_its_layout():
    torch.manual_seed(0)
    fast = GPSLayer(16, 4, gate="elementwise", impl="packed").to(DT)
    torch.manual_seed(0)
    slow = GPSLayer(16, 4, gate="elementwise", impl="reference").to(DT)
    b = batch()
    x = torch.randn(b.num_nodes, 16, dtype=DT, requires_grad=True)
    e = torch.randn(b.edge_index.size(1), 16, dtype=DT)
    (y1, _), (y2, _) = fast(x, b.edge_index, e, b.batch), slow(x, b.edge_index, e, b.batch)
    assert torch.allclose(y1, y2, atol=1e-10)
    g1, = torch.autograd.grad(y1.sum(), x)
    g2, = torch.autograd.grad(y2.sum(), x)
    assert torch.allclose(g1, g2, atol=1e-10)


@pytest.mark.parametrize("impl", ["reference", "sdpa", "packed"])
def test_full_attention_of_a_batch_in_any_node_order(impl):
    """A batch vector not sorted by graph (nodes gathered by a sampler) gave full attention
    across graphs' rows in every implementation, with no error: each layout assumed a graph's
    rows contiguous. The output of a node now does not depend on the order of the rows, and equals
    an independent per-graph softmax."""
    sizes = [5, 1, 9, 3, 7]
    b = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    perm = torch.randperm(b.numel(), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    layer = GPSLayer(16, 4, gate="elementwise", impl=impl, local="none").to(DT).eval()
    x = torch.randn(b.numel(), 16, dtype=DT)
    attn = layer.attn
    with torch.no_grad():
        (want, _), (got, _) = layer(x, None, None, b), layer(x[perm], None, None, b[perm])
        out = attn.forward_nodes(x[perm], attn.make_layout(b[perm], None, impl=impl))
        q, k, v, gate = (x @ attn.in_proj.weight.T + attn.in_proj.bias).split([16, 16, 16, 16], dim=1)
        heads = torch.zeros_like(x)
        for g in range(len(sizes)):
            m = b == g
            for h in range(4):
                c = slice(4 * h, 4 * h + 4)
                heads[m, c] = torch.softmax(q[m, c] @ k[m, c].T / 2.0, dim=-1) @ v[m, c]
        ref = (heads * torch.sigmoid(gate)) @ attn.out_proj.weight.T + attn.out_proj.bias
    assert torch.allclose(out, ref[perm], atol=1e-10)
    assert torch.allclose(got, want[perm], atol=1e-10)


def test_return_details_still_reads_the_padded_attention():
    torch.manual_seed(0)
    model = SigGateGT(1, dim=16, layers=2, heads=4, gate="headwise").to(DT).eval()
    b = batch()
    out, det = model(b, return_details=True)
    assert torch.allclose(out, model(b), atol=1e-10)
    assert det["attn"][0]["attn"].shape == (len(SIZES), 4, max(SIZES), max(SIZES))


# ----------------------------------------------------------------------------- layout


@pytest.mark.parametrize("call_cost", [0.0, 4096.0, 1e12])
def test_packed_layout_covers_every_node_once(call_cost):
    sizes = [5, 1, 9, 9, 2, 30, 7, 0, 5]  # one empty graph
    b = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    lay = PackedLayout.from_batch(b, len(sizes), call_cost=call_cost)
    seen = torch.cat([ids[v] if v is not None else ids.reshape(-1) for ids, v in zip(lay.nodes, lay.valid)])
    assert torch.equal(seen.sort().values, torch.arange(b.numel()))
    for (g, n), ids, v in zip(lay.groups, lay.nodes, lay.valid):
        assert ids.shape == (g, n)
        per_graph = b[ids[:, 0]]  # every row holds one graph
        assert ((b[ids] == per_graph[:, None]) | (~v if v is not None else False)).all()
    # gathers are inverse to each other
    H = 2
    idx = lay.out_index(H)
    src, pad = lay.out_source(H)
    assert torch.equal(src[idx], torch.arange(b.numel() * H))
    if call_cost == 1e12:
        assert len(lay.groups) == 1
    if call_cost == 0.0:
        assert len(lay.groups) == len({n for n in sizes if n})


def test_batch_of_one_has_no_padding_and_no_mask():
    lay = PackedLayout.from_batch(torch.zeros(50, dtype=torch.long), 1)
    assert lay.groups == [(1, 50)] and lay.valid == [None]
    assert lay.bias(0, DT) is None and lay.bias_bmm(0, 4, DT) is None
    same = PackedLayout.from_batch(torch.arange(3).repeat_interleave(7), 3)
    assert same.valid == [None]  # equal sizes: no padding either


# ----------------------------------------------------------------------------- kernels


def _proj(n_nodes, d, gate_dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n_nodes, 3 * d + gate_dim, generator=g, dtype=DT, requires_grad=True)


def _fix_dropout_masks(monkeypatch, chunked: bool) -> None:
    """A fixed dropout mask per shape (so the kernels are deterministic and can be
    gradchecked); with ``chunked``, every group goes through the chunked kernel."""
    def fixed_keep(shape, p, like, generator=None):
        g = torch.Generator().manual_seed(int(sum(shape)))
        return (torch.rand(shape, generator=g, dtype=like.dtype) >= p).to(like.dtype) / (1 - p)

    monkeypatch.setattr(K, "dropout_keep", fixed_keep)
    if chunked:
        monkeypatch.setattr(K, "CHUNKED_MIN_NODES", 1)
        monkeypatch.setattr(K, "CHUNK_ROWS", 2)


@pytest.mark.parametrize("d,gate_dim", [
    (16, 0), (16, 16), (16, 4),  # q, k, v read in place from the projection
    (32, 4),  # 3d + H is not a multiple of d_head: q, k, v are stacked first
])
@pytest.mark.parametrize("chunked", [False, True])
def test_packed_core_gradcheck_with_dropout(monkeypatch, d, gate_dim, chunked):
    """The hand-written backward, dropout included: a fixed mask per shape makes the
    function deterministic, so it can be checked against numerical derivatives."""
    _fix_dropout_masks(monkeypatch, chunked)
    sizes = [3, 1, 4, 4]
    b = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    lay = PackedLayout.from_batch(b, len(sizes), call_cost=1.0)
    proj = _proj(b.numel(), d, gate_dim)
    n = b.numel()

    def f(p):
        q, k, v = (t.view(n, 4, -1) for t in p.split([d, d, d, gate_dim], 1)[:3])
        return packed_core(q, k, v, lay, 0.5)

    with torch.no_grad():  # as inside the autograd node
        rows, stride = K.qkv_rows(*(t.view(n, 4, -1) for t in proj.split([d, d, d, gate_dim], 1)[:3]))
    width, dh = 3 * d + gate_dim, d // 4
    assert stride == (width // dh if width % dh == 0 else 12)
    assert (rows.data_ptr() == proj.data_ptr()) == (width % dh == 0)
    assert torch.autograd.gradcheck(f, (proj,), eps=1e-6, atol=1e-6, fast_mode=True)


@pytest.mark.parametrize("d,gate_dim", [(16, 0), (16, 16), (32, 4)])  # aligned, aligned with a gate, copied
@pytest.mark.parametrize("chunked", [False, True])
def test_projected_core_gradcheck_and_equals_projection_then_core(monkeypatch, d, gate_dim, chunked):
    """``ProjectedCore`` (the input projection and the packed core as one node) equals the
    projection followed by ``packed_core`` and returns the other columns untouched; its
    backward, the gate columns' gradient included, passes gradcheck."""
    _fix_dropout_masks(monkeypatch, chunked)
    sizes = [3, 1, 4, 4]
    b = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    lay = PackedLayout.from_batch(b, len(sizes), call_cost=1.0)
    n, width = b.numel(), 3 * d + gate_dim
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, d, generator=g, dtype=DT, requires_grad=True)
    w = torch.randn(width, d, generator=g, dtype=DT, requires_grad=True)
    bias = torch.randn(width, generator=g, dtype=DT, requires_grad=True)
    scale = 1.0 / math.sqrt(d // 4)

    def fused(x, w, bias):
        o, rest = K.ProjectedCore.apply(x, w, bias, d, lay, 4, 0.5, scale)
        return o, rest.sin()  # the rest's gradient reaches the projection too

    def separate(x, w, bias):
        proj = x @ w.t() + bias
        q, k, v, rest = proj.split([d, d, d, gate_dim], 1)
        return packed_core(q.view(n, 4, -1), k.view(n, 4, -1), v.view(n, 4, -1), lay, 0.5), rest.sin()

    for a, c in zip(fused(x, w, bias), separate(x, w, bias)):
        assert torch.allclose(a, c, atol=1e-12)
    assert torch.autograd.gradcheck(fused, (x, w, bias), eps=1e-6, atol=1e-6, fast_mode=True)


def test_dropout_keep_is_bernoulli():
    torch.manual_seed(0)
    keep = K.dropout_keep((200_000,), 0.3, torch.empty(0, dtype=DT))
    assert set(keep.unique().tolist()) == {0.0, 1 / 0.7}
    assert abs((keep == 0).double().mean().item() - 0.3) < 0.005


def test_dropout_is_active_in_training_and_off_in_eval():
    torch.manual_seed(0)
    model = SigGateGT(1, dim=16, layers=1, heads=4, attn_dropout=0.5).to(DT)
    b = batch()
    model.train()
    assert not torch.allclose(model(b), model(b))
    model.eval()
    assert torch.allclose(model(b), model(b))


@pytest.mark.parametrize("edge_chunk", [None, 2])
def test_gine_and_mlp_blocks_gradcheck(edge_chunk, monkeypatch):
    if edge_chunk:  # several chunks of edges
        monkeypatch.setattr("siggate.nn.kernels.fused_blocks.GINE_EDGE_CHUNK", edge_chunk)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 3, dtype=DT, generator=g, requires_grad=True)
    e = torch.randn(9, 3, dtype=DT, generator=g, requires_grad=True)
    src = torch.tensor([0, 1, 2, 3, 4, 5, 0, 2, 4])
    dst = torch.tensor([1, 2, 3, 4, 5, 0, 3, 5, 1])
    eps = torch.tensor([0.3], dtype=DT, requires_grad=True)
    w1, w2 = (torch.randn(3, 3, dtype=DT, generator=g, requires_grad=True) for _ in range(2))
    b1, b2 = (torch.randn(3, dtype=DT, generator=g, requires_grad=True) for _ in range(2))
    assert torch.autograd.gradcheck(lambda *a: GINEResidual.apply(a[0], src, dst, *a[1:]), (x, e, eps, w1, b1, w2, b2))
    r = torch.randn(6, 3, dtype=DT, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(MLPResidual.apply, (x, r, w1, b1, w2, b2))
    # and it is the module's computation
    conv = GINELocal(3, train_eps=True).to(DT)
    ei = torch.stack([src, dst])
    assert torch.allclose(conv.forward_residual(x, ei, e), x + conv(x, ei, e)[0], atol=1e-12)


def test_chunked_training_memory_is_not_quadratic(monkeypatch):
    """A 600-node graph in training with dropout: no saved tensor has n^2 entries."""
    n = 600
    assert n >= K.CHUNKED_MIN_NODES
    lay = PackedLayout.from_batch(torch.zeros(n, dtype=torch.long), 1)
    proj = torch.randn(n, 48, requires_grad=True)
    sizes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t, lambda t: t):
        out = packed_core(*proj.view(n, 3, 4, 4).unbind(1), lay, 0.5)
    assert max(sizes) < n * n
    out.sum().backward()
    assert torch.isfinite(proj.grad).all()


def test_accelerator_kernel_matches_cpu_kernel():
    """The SDPA-per-group path used on GPUs, run here on CPU, against the CPU kernel."""
    sizes = [3, 1, 4, 4, 7]
    b = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    lay = PackedLayout.from_batch(b, len(sizes), call_cost=1.0)
    proj = _proj(b.numel(), 16, 0)
    ref = packed_core(*proj.view(-1, 3, 4, 4).unbind(1), lay, 0.0)
    out = sdpa_groups(*proj.view(-1, 3, 4, 4).unbind(1), lay, 0.0)
    assert torch.allclose(out, ref, atol=1e-12)
    g1, = torch.autograd.grad((ref**2).sum(), proj)
    g2, = torch.autograd.grad((out**2).sum(), proj)
    assert torch.allclose(g1, g2, atol=1e-12)


def bf16_against_float32(gate: str, device: str = "cpu") -> tuple:
    """A float32 model on ``device`` under bfloat16 autocast and without, on the same batch:
    ``(out, ref, grads_finite)`` (the autocast output, float32's, and whether the gradients of a
    backward under autocast are all finite). ``benchmarks/gpu_check.py`` runs it on a GPU."""
    torch.manual_seed(0)
    model = SigGateGT(2, dim=16, layers=2, heads=4, gate=gate, attn_dropout=0.0).to(device)
    b = batch_as(batch(), torch.float32).to(device)
    ref = model(b)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(b)
        out.float().sum().backward()
    return out.float(), ref, all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)


BF16_TOL = 0.02  # about 5 bfloat16 epsilons (2**-8) on outputs of std about 0.33; measured error about 0.004


@pytest.mark.parametrize("gate", ["none", "elementwise"])
def test_bf16_autocast_runs_close_to_float32(gate):
    """Under autocast the fused single-dtype blocks step aside; results stay close, and closer
    than the model without its attention branch is: a tolerance of 0.1 passed with the branch
    dropped under autocast."""
    out, ref, grads_finite = bf16_against_float32(gate)
    assert torch.allclose(out, ref, atol=BF16_TOL, rtol=BF16_TOL)
    assert grads_finite
    torch.manual_seed(0)
    model = SigGateGT(2, dim=16, layers=2, heads=4, gate=gate, attn_dropout=0.0)
    with torch.no_grad():
        for layer in model.layers:
            layer.attn.out_proj.weight.zero_()
            layer.attn.out_proj.bias.zero_()
    assert not torch.allclose(model(batch_as(batch(), torch.float32)), ref, atol=BF16_TOL, rtol=BF16_TOL)


# The CUDA twin of these checks is benchmarks/gpu_check.py (run it on a GPU machine); it is
# not a test here because CI has no GPU and a skipped test checks nothing. Its plumbing is
# checked here with the CPU in the GPU's place, on a subset of its checks.


def test_gpu_check_runs_its_checks_with_the_cpu_in_the_gpus_place(tmp_path, monkeypatch, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("siggate_gpu_check", path)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    monkeypatch.setattr(gpu_check, "SIZES", {"small": SIZES})
    monkeypatch.setattr(gpu_check, "POSITIONS", {"elementwise": ["value"]})
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--device", "cpu", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert sorted(res["checks"]) == ["attn_exphormer", "attn_performer", "bf16_elementwise", "bf16_none",
                                     "eval_elementwise_small", "fp32_elementwise_small",
                                     "train_elementwise_value_small"]
    assert res["failed"] == [] and all(c["ok"] for c in res["checks"].values())
    assert res["checks"]["train_elementwise_value_small"]["grad"] < 1e-10
    assert 1e-9 < res["checks"]["fp32_elementwise_small"]["grad"] < 1e-4  # float32 against float64
    assert "7 of 7 checks pass" in capsys.readouterr().out
    monkeypatch.setattr(gpu_check, "ATOL", -1.0)  # no difference passes: every float64 check fails
    assert gpu_check.main(["--device", "cpu", "--out", str(out)]) == 1
    failed = json.loads(out.read_text())["failed"]
    assert sorted(failed) == ["attn_exphormer", "attn_performer", "eval_elementwise_small",
                              "train_elementwise_value_small"]
    monkeypatch.setenv("SIGGATE_ATTN_IMPL", "reference")
    assert gpu_check.main(["--device", "cpu"]) == 2
    assert capsys.readouterr().err.endswith("the fast path would not be checked: unset it\n")  # (a refusal: stderr)
    if not torch.cuda.is_available():
        assert gpu_check.main([]) == 2
        assert capsys.readouterr().err == "gpu_check: error: no CUDA device: nothing to check\n"


# ----------------------------------------------------------------------------- bench


def test_bench_smoke_writes_documented_keys(tmp_path):
    from siggate.cli import main

    rc = main(["bench", "--dataset", "synthetic", "--repeats", "1", "--warmup", "1", "--batches", "2",
               "--batch-size", "4", "--layers", "1", "--dim", "16", "--threads", "1", "--out", str(tmp_path)])
    assert rc == 0
    res = json.loads((tmp_path / "bench.json").read_text())
    for key in ("train_ratio_vs_pyg", "infer_ratio_vs_pyg", "overhead_headwise", "overhead_elementwise",
                "peak_mem_ratio_vs_pyg", "params", "machine"):
        assert key in res, key
    assert set(res["params"]) == {"none", "headwise", "elementwise", "pyg"}
    assert res["params"]["none"] == res["params"]["pyg"]  # same architecture, same count
    zinc = res["configs"]["zinc"]  # the top level repeats the zinc block's medians
    for key, median in (("train_ratio_vs_pyg", zinc["ratios"]["train_none_vs_pyg"]["median"]),
                        ("infer_ratio_vs_pyg", zinc["ratios"]["infer_none_vs_pyg"]["median"]),
                        ("overhead_headwise", zinc["overhead_headwise"]["median"]),
                        ("overhead_elementwise", zinc["overhead_elementwise"]["median"]),
                        ("peak_mem_ratio_vs_pyg", zinc["peak_mem_ratio_vs_pyg"])):
        low = -1 if key.startswith("overhead") else 0  # an overhead is a ratio less one: below 0 where faster
        assert math.isfinite(res[key]) and res[key] > low and res[key] == median, (key, res[key], median)
    assert {"torch", "threads", "cpu"} <= set(res["machine"])
    assert res["command"].startswith("siggate bench")


def test_bench_scaling_smoke(tmp_path):
    from siggate.perf.bench import main

    assert main(["--scaling", "--sizes", "8,16", "--variants", "none,pyg", "--repeats", "1", "--layers", "1",
                 "--dim", "16", "--threads", "1", "--warmup", "2", "--note", "smoke", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "scaling.json").read_text())
    assert [r["nodes"] for r in res["rows"]] == [8, 8, 16, 16]
    # --warmup and --note were ignored here (one warm-up step; no note), and recorded in the command line
    assert res["warmup_steps"] == 2 and res["note"] == "smoke" and "--warmup 2" in res["command"]
    assert all(r["train_peak_bytes"] > 0 for r in res["rows"])
    assert (tmp_path / "scaling.png").stat().st_size > 0
