"""Model options behind the evidence study: the parameter-matched ungated control, the gate's
weight-initialisation scale and GraphGPS's LapPE DeepSet."""

import pytest
import torch
from torch import nn

from siggate.config import ConfigError, load_config
from siggate.data.base import TaskInfo
from siggate.nn.encoders import LapPEEncoder
from siggate.nn.model import SigGateGT, matched_ffn_dim

ZINC_INFO = TaskInfo(name="zinc", task="regression", num_tasks=1, metric="mae", node_features="typed",
                     num_node_types=28, num_edge_types=4)
HIV_INFO = TaskInfo(name="molhiv", task="binary", num_tasks=1, metric="rocauc")


def _params(config: str, sets: list[str], info) -> int:
    cfg = load_config(config, sets)
    return sum(p.numel() for p in SigGateGT.from_config(cfg.model, info).parameters())


@pytest.mark.parametrize("config,info", [("zinc", ZINC_INFO), ("molhiv", HIV_INFO), ("nci5k", HIV_INFO)])
def test_matched_control_has_the_elementwise_parameter_count(config, info):
    none = _params(config, ["model.gate=none"], info)
    gated = _params(config, ["model.gate=elementwise"], info)
    matched = _params(config, ["model.gate=none", "model.param_match=ffn"], info)
    assert gated > none * 1.01  # the gate adds more than 1% ...
    assert abs(matched - gated) / gated < 0.01  # ... and the control closes the gap to within 1%


def test_matched_ffn_rule():
    # d = 64: the gate adds 64*64 + 64 = 4160 per layer; 32 more hidden units add 32 * 129 = 4128
    assert matched_ffn_dim(64) == 160
    for d in (16, 64, 96, 256):
        k = matched_ffn_dim(d) - 2 * d
        assert abs(k * (2 * d + 1) - d * (d + 1)) <= (2 * d + 1) / 2
    cfg = load_config("zinc", ["model.gate=none", "model.param_match=ffn"])
    layer = SigGateGT.from_config(cfg.model, ZINC_INFO).layers[0]
    assert layer.ff1.weight.shape == (160, 64) and layer.ff2.weight.shape == (64, 160)
    assert load_config("zinc", ["model.gate=none", "model.ffn_dim=100"]).model.ffn_dim == 100
    with pytest.raises(ConfigError, match="model.param_match.*model.gate='elementwise'"):
        load_config("zinc", ["model.param_match=ffn"])
    with pytest.raises(ConfigError, match="remove model.ffn_dim"):
        load_config("zinc", ["model.gate=none", "model.param_match=ffn", "model.ffn_dim=128"])
    with pytest.raises(ConfigError, match="model.param_match"):
        load_config("zinc", ["model.gate=none", "model.param_match=width"])


def test_gate_weight_std_reaches_the_gate():
    cfg = load_config("zinc", ["model.gate_weight_std=0", "model.gate_bias_init=0.5"])
    assert cfg.model.gate_weight_std == 0.0
    model = SigGateGT.from_config(cfg.model, ZINC_INFO)
    for attn in model.attention_modules():
        w, b = attn.in_proj.weight[3 * attn.dim:], attn.in_proj.bias[3 * attn.dim:]
        assert torch.count_nonzero(w) == 0 and torch.all(b == 0.5)  # the gate starts at sigmoid(0.5)
    torch.manual_seed(0)
    cfg = load_config("zinc", ["model.gate_weight_std=0.02"])
    w = SigGateGT.from_config(cfg.model, ZINC_INFO).attention_modules()[0].in_proj.weight[3 * 64:].detach()
    assert 0.015 < float(w.std()) < 0.025
    assert load_config("zinc").model.gate_weight_std is None  # default: Xavier-uniform, as q, k, v
    with pytest.raises(ConfigError, match="gate_weight_std"):
        load_config("zinc", ["model.gate_weight_std=-1"])
    with pytest.raises(ConfigError, match="gate_weight_std"):
        load_config("zinc", ["model.gate_weight_std=wide"])
    # past float32's range: the bias's fill raised RuntimeError, the weights became inf (helper-174)
    with pytest.raises(ConfigError, match=r"^model.gate_weight_std: 1e\+39 is out of range; allowed values: >= 0 and "
                                          r"<= 10000.0, or null"):
        load_config("zinc", ["model.gate_weight_std=1e39"])
    with pytest.raises(ConfigError, match=r"^model.gate_bias_init: -1e\+39 is out of range; allowed values: >= "
                                          r"-10000.0 and <= 10000.0\.$"):
        load_config("zinc", ["model.gate_bias_init=-1e39"])
    assert load_config("zinc", ["model.gate_bias_init=-10000", "model.gate_weight_std=10000"]).model.gate_bias_init == -1e4
    for seed in ("-1", "9223372036854775808"):  # (a traceback where the layer was built)
        with pytest.raises(ConfigError, match=f"^model.attention.exphormer.expander_seed: {seed} is out of range; "
                                              f"allowed values: >= 0 and <= 9223372036854775807"):
            load_config("zinc", [f"model.attention.exphormer.expander_seed={seed}"])


def test_lappe_deepset_matches_graphgps():
    enc = LapPEEncoder(m=3, pe_dim=8, layers=2)
    linears = [enc.lin_in] + [m for m in enc.mlp if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(2, 16), (16, 8)]
    assert [type(m).__name__ for m in enc.mlp] == ["ReLU", "Linear", "ReLU"]
    assert [(m.in_features, m.out_features) for m in [LapPEEncoder(3, 8, layers=1).lin_in]] == [(2, 8)]
    three = LapPEEncoder(3, 8, layers=3)
    assert [(m.in_features, m.out_features) for m in three.mlp if isinstance(m, nn.Linear)] == [(16, 16), (16, 8)]
    # values: sum over the (eigvec, eigval) pairs of ReLU(W2 ReLU(W1 [u, l] + b1) + b2); NaN pairs count as absent
    enc.eval()
    vec = torch.tensor([[0.5, -0.2, float("nan")], [0.1, 0.3, float("nan")]])
    val = torch.tensor([[0.0, 1.0, float("nan")], [0.0, 1.0, float("nan")]])
    data = type("D", (), {"lap_vec": vec, "lap_val": val, "batch": None})()
    w1, b1, w2, b2 = enc.lin_in.weight, enc.lin_in.bias, enc.mlp[1].weight, enc.mlp[1].bias
    want = torch.zeros(2, 8)
    for i in range(2):
        for j in range(2):
            h = torch.relu(w1 @ torch.stack([vec[i, j], val[i, j]]) + b1)
            want[i] += torch.relu(w2 @ h + b2)
    torch.testing.assert_close(enc(data), want)


def _module_signatures() -> dict:
    """``{qualified name: {parameter: default}}`` of every ``nn.Module`` constructor defined
    in ``siggate.nn`` and ``siggate.perf``, and of ``make_attention``."""
    import importlib
    import inspect
    import pkgutil

    import siggate.nn
    import siggate.perf
    from siggate.nn.attention_types import make_attention

    out = {"siggate.nn.attention_types.make_attention": make_attention}
    for pkg in (siggate.nn, siggate.perf):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            mod = importlib.import_module(info.name)
            for name, obj in vars(mod).items():
                if (inspect.isclass(obj) and issubclass(obj, nn.Module) and obj.__module__ == mod.__name__
                        and "__init__" in obj.__dict__):
                    out[f"{mod.__name__}.{name}"] = obj.__init__
    return {k: {n: p.default for n, p in inspect.signature(fn).parameters.items()
                if p.default is not inspect.Parameter.empty} for k, fn in out.items()}


#: the same name with another meaning, not a shared option (why, per constructor)
OTHER_MEANING = {
    ("layers", "siggate.nn.encoders.LapPEEncoder"): "the layers of LapPE's DeepSet, not GPS layers",
    ("layers", "siggate.perf.scaling_large.NodeClassifier"): "the --scaling-large benchmark's depth",
    ("layers", "siggate.perf.scaling_large.PyGPerformerClassifier"): "the --scaling-large benchmark's depth",
    ("pool_norm", "siggate.perf.bench.PyGReference"): "the resolved divisor (1.0: none), not the config's 0 = unset",
}


def test_shared_defaults_are_written_once():
    """A default that several signatures share has one value: the options of
    ``GPSOptions`` have its defaults everywhere (and in ``ModelConfig``); any other name in
    two constructors has one default; ``GatedGPSConv``'s PyG arguments have PyG's."""
    import dataclasses
    import inspect

    from torch_geometric.nn import GPSConv

    from siggate.config import ModelConfig
    from siggate.options import GPSOptions

    sigs = _module_signatures()
    pyg = {n: p.default for n, p in inspect.signature(GPSConv.__init__).parameters.items()}
    ours = "siggate.nn.gps_conv.GatedGPSConv"
    for name in set(pyg) & set(sigs[ours]):
        assert sigs[ours][name] == pyg[name], (name, sigs[ours][name], pyg[name])
    seen: dict = {}
    for where, defaults in sigs.items():
        for name, value in defaults.items():
            if (name, where) in OTHER_MEANING or (where == ours and name in pyg):
                continue
            seen.setdefault(name, {})[where] = value
    options = {f.name: f.default for f in dataclasses.fields(GPSOptions)}
    counted = {name: len(places) for name, places in seen.items() if name in options}
    assert counted["heads"] >= 5 and counted["impl"] >= 5 and counted["gate"] >= 2, counted
    for name, places in seen.items():
        values = {repr(v) for v in places.values()}
        expected = {repr(options[name])} if name in options else values
        assert len(values) == 1 and values == expected, (name, places)
    cfg = ModelConfig()
    for name, value in options.items():
        assert getattr(cfg, name) == value, name


def test_layer_options_pass_through_and_misspelt_ones_are_refused():
    """``SigGateGT`` writes no layer option again: it passes them to every ``GPSLayer``,
    which passes the attention's on; a name none of them takes fails where it was given."""
    model = SigGateGT(1, dim=16, layers=2, heads=2, local="gatedgcn", gate="headwise", gate_position="value",
                      gate_bias_init=1.5, gate_weight_std=0.0, attn_dropout=0.25, dropout=0.1, ffn_dim=24,
                      attn_type="performer", attn_kwargs={"num_features": 8})
    for layer in model.layers:
        a = layer.attn
        assert (a.heads, a.gate, a.gate_position, a.gate_bias_init, a.gate_weight_std, a.attn_dropout,
                a.num_features) == (2, "headwise", "value", 1.5, 0.0, 0.25, 8)
        assert (layer.local_kind, layer.dropout, layer.ff1.out_features) == ("gatedgcn", 0.1, 24)
    with pytest.raises(TypeError, match="unknown layer option 'gate_bias'; did you mean 'gate_bias_init'"):
        SigGateGT(1, gate_bias=1.0)
    from siggate.nn import GatedGPSConv, GPSLayer

    with pytest.raises(TypeError, match="unknown attention option 'gat'; did you mean 'gate'"):
        GPSLayer(16, 4, gat="none")
    with pytest.raises(TypeError, match=r"takes \['attn_dropout'\] as attn_kwargs \['dropout'\]"):
        GatedGPSConv(16, None, heads=4, attn_dropout=0.5)
