"""A BERT sentence-transformers model (all-MiniLM-L6-v2) written as an ONNX graph from its
`model.safetensors`, with numpy and the `onnx` package: no torch, no transformers.

The graph is the one `torch.onnx.export` writes for app/embeddings/onnx_model.py's `Pooled`
module (the transformer, mean pooling over the attention mask, L2 normalisation), op for op
where it matters: the same inputs and output, the same weights, each Linear a MatMul on the
transposed weight then an Add, LayerNormalization, GELU as erf, and the same node names for
the MatMuls the int8 copy quantizes or keeps (`_kept_float` reads them). Its vectors equal the
torch export's to float32 rounding (tests/embeddings/test_onnx_bert.py holds the two to a
cosine of 0.99999 on texts of every length, and their int8 copies alike).

Only what the packaged model is: `model_type` bert, absolute positions, `gelu`. Any other
model (all-mpnet-base-v2 among them) is exported by torch, as before.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np

WEIGHTS = "model.safetensors"
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def supported(source: Path) -> bool:
    """Whether `source` is a BERT this module writes (else torch exports it)."""
    config_path = source / "config.json"
    if not (source / WEIGHTS).exists() or not config_path.exists():
        return False
    config = json.loads(config_path.read_text(encoding="utf-8"))
    return (
        config.get("model_type") == "bert"
        and config.get("position_embedding_type", "absolute") == "absolute"
        and config.get("hidden_act") == "gelu"
    )


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file (an 8-byte header length, a JSON header of dtypes,
    shapes and offsets, then the raw little-endian data), as numpy arrays."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    base = 8 + length
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[base + begin : base + end], dtype=_DTYPES[info["dtype"]])
        tensors[name] = array.reshape(info["shape"]).astype(np.float32, copy=False)
    return tensors


class _Graph:
    """Nodes and initializers, named as the torch export names them."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(self.numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, **attrs: Any) -> str:
        out = f"{name}_output_0"
        self.nodes.append(self.helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def linear(self, x: str, w: dict[str, np.ndarray], prefix: str, path: str) -> str:
        """x @ W.T + b, as torch exports an nn.Linear (MatMul named `<path>/MatMul`)."""
        weight = self.const(f"onnx::MatMul_{prefix}", np.ascontiguousarray(w[f"{prefix}.weight"].T))
        bias = self.const(f"{prefix}.bias", w[f"{prefix}.bias"])
        return self.op(
            "Add", [self.op("MatMul", [x, weight], f"{path}/MatMul"), bias], f"{path}/Add"
        )

    def layer_norm(
        self, x: str, w: dict[str, np.ndarray], prefix: str, path: str, eps: float
    ) -> str:
        scale = self.const(f"{prefix}.weight", w[f"{prefix}.weight"])
        bias = self.const(f"{prefix}.bias", w[f"{prefix}.bias"])
        return self.op(
            "LayerNormalization",
            [x, scale, bias],
            f"{path}/LayerNormalization",
            axis=-1,
            epsilon=eps,
        )


def build(source: Path, into: Path, normalize: bool) -> list[str]:
    """Write `into/model.onnx` from `source`'s config.json and model.safetensors (blocking);
    the graph's input names."""
    import onnx
    from onnx import TensorProto, helper

    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    w = read_safetensors(source / WEIGHTS)
    w = {k.removeprefix("bert."): v for k, v in w.items()}
    heads, hidden = config["num_attention_heads"], config["hidden_size"]
    head_size, eps = hidden // heads, float(config.get("layer_norm_eps", 1e-12))
    g = _Graph()
    c = g.const
    i64 = np.int64

    # Embeddings: words + positions 0..S-1 + token types, then LayerNorm.
    ids, mask, types = "input_ids", "attention_mask", "token_type_ids"
    shape = g.op("Shape", [ids], "/model/embeddings/Shape")
    seq = g.op(
        "Gather", [shape, c("seq_axis", np.array(1, i64))], "/model/embeddings/Gather", axis=0
    )
    positions = g.op(
        "Range",
        [c("zero_i64", np.array(0, i64)), seq, c("one_i64", np.array(1, i64))],
        "/model/embeddings/Range",
    )
    e = "/model/embeddings"
    words = g.op(
        "Gather",
        [c("embeddings.word_embeddings.weight", w["embeddings.word_embeddings.weight"]), ids],
        f"{e}/word/Gather",
    )
    kinds = g.op(
        "Gather",
        [
            c(
                "embeddings.token_type_embeddings.weight",
                w["embeddings.token_type_embeddings.weight"],
            ),
            types,
        ],
        f"{e}/token_type/Gather",
    )
    where = g.op(
        "Gather",
        [
            c("embeddings.position_embeddings.weight", w["embeddings.position_embeddings.weight"]),
            positions,
        ],
        f"{e}/position/Gather",
    )
    x = g.op("Add", [g.op("Add", [words, kinds], f"{e}/Add"), where], f"{e}/Add_1")
    x = g.layer_norm(x, w, "embeddings.LayerNorm", f"{e}/LayerNorm", eps)

    # The attention bias: 0 where the mask is 1, float32's lowest where it is 0 ([B,1,1,S]).
    maskf = g.op("Cast", [mask], "/model/Cast", to=TensorProto.FLOAT)
    expanded = g.op("Unsqueeze", [maskf, c("axes_1_2", np.array([1, 2], i64))], "/model/Unsqueeze")
    inverted = g.op("Sub", [c("one_f", np.array(1.0, np.float32)), expanded], "/model/Sub")
    bias = g.op(
        "Mul", [inverted, c("lowest", np.array(np.finfo(np.float32).min, np.float32))], "/model/Mul"
    )
    split = c("heads_shape", np.array([0, 0, heads, head_size], i64))
    merged = c("hidden_shape", np.array([0, 0, hidden], i64))
    # 1/sqrt(head size) applied as its square root to q and to k, as the export does.
    scale = c("quarter_root", np.array(head_size**-0.25, np.float32))

    for n in range(config["num_hidden_layers"]):
        p, path = f"encoder.layer.{n}", f"/model/encoder/layer.{n}"
        a = f"{path}/attention/self"

        def heads_of(t: str, part: str, perm: list[int], a: str = a) -> str:
            r = g.op("Reshape", [t, split], f"{a}/{part}/Reshape")
            return g.op("Transpose", [r], f"{a}/{part}/Transpose", perm=perm)

        q = heads_of(g.linear(x, w, f"{p}.attention.self.query", f"{a}/query"), "q", [0, 2, 1, 3])
        k = heads_of(g.linear(x, w, f"{p}.attention.self.key", f"{a}/key"), "k", [0, 2, 3, 1])
        v = heads_of(g.linear(x, w, f"{p}.attention.self.value", f"{a}/value"), "v", [0, 2, 1, 3])
        q, k = g.op("Mul", [q, scale], f"{a}/Mul"), g.op("Mul", [k, scale], f"{a}/Mul_1")
        scores = g.op("MatMul", [q, k], f"{a}/MatMul")
        probs = g.op("Softmax", [g.op("Add", [scores, bias], f"{a}/Add")], f"{a}/Softmax", axis=-1)
        context = g.op(
            "Transpose",
            [g.op("MatMul", [probs, v], f"{a}/MatMul_1")],
            f"{a}/Transpose",
            perm=[0, 2, 1, 3],
        )
        context = g.op("Reshape", [context, merged], f"{a}/Reshape")
        o = f"{path}/attention/output"
        attended = g.linear(context, w, f"{p}.attention.output.dense", f"{o}/dense")
        x = g.layer_norm(
            g.op("Add", [attended, x], f"{o}/Add"),
            w,
            f"{p}.attention.output.LayerNorm",
            f"{o}/LayerNorm",
            eps,
        )
        i = f"{path}/intermediate"
        h = g.linear(x, w, f"{p}.intermediate.dense", f"{i}/dense")
        # GELU, exactly: x * 0.5 * (1 + erf(x / sqrt(2))).
        erf = g.op(
            "Erf",
            [
                g.op(
                    "Div",
                    [h, c(f"sqrt2_{n}", np.array(math.sqrt(2), np.float32))],
                    f"{i}/intermediate_act_fn/Div",
                )
            ],
            f"{i}/intermediate_act_fn/Erf",
        )
        one_plus = g.op(
            "Add", [erf, c(f"one_{n}", np.array(1.0, np.float32))], f"{i}/intermediate_act_fn/Add"
        )
        h = g.op(
            "Mul",
            [
                g.op("Mul", [h, one_plus], f"{i}/intermediate_act_fn/Mul"),
                c(f"half_{n}", np.array(0.5, np.float32)),
            ],
            f"{i}/intermediate_act_fn/Mul_1",
        )
        o = f"{path}/output"
        out = g.linear(h, w, f"{p}.output.dense", f"{o}/dense")
        x = g.layer_norm(
            g.op("Add", [out, x], f"{o}/Add"), w, f"{p}.output.LayerNorm", f"{o}/LayerNorm", eps
        )

    # Mean pooling over the mask (at least 1e-9 of it), then (optionally) L2 normalisation.
    weights = g.op("Unsqueeze", [maskf, c("axis_last", np.array([-1], i64))], "/Unsqueeze")
    summed = g.op(
        "ReduceSum",
        [g.op("Mul", [x, weights], "/Mul"), c("axis_seq", np.array([1], i64))],
        "/ReduceSum",
        keepdims=0,
    )
    count = g.op(
        "ReduceSum", [weights, c("axis_seq_2", np.array([1], i64))], "/ReduceSum_1", keepdims=0
    )
    count = g.op("Clip", [count, c("min_count", np.array(1e-9, np.float32))], "/Clip")
    pooled = g.op("Div", [summed, count], "/Div")
    if normalize:
        # ReduceL2 takes its axes as an attribute until opset 18 (ReduceSum as an input).
        norm = g.op("ReduceL2", [pooled], "/ReduceL2", axes=[1], keepdims=1)
        norm = g.op("Clip", [norm, c("min_norm", np.array(1e-12, np.float32))], "/Clip_1")
        pooled = g.op("Div", [pooled, norm], "/Div_1")
    g.nodes.append(helper.make_node("Identity", [pooled], ["embedding"], name="/Identity"))

    dims = ["batch", "sequence"]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, dims) for n in (ids, mask, types)]
    output = helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", hidden])
    graph = helper.make_graph(g.nodes, "main_graph", inputs, [output], g.initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="htm"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(into / "model.onnx"))
    return [ids, mask, types]
