"""An int8 ONNX graph made float32 once, at load, so that it answers the same on every CPU.

onnxruntime's `quantize_dynamic` writes each weight matmul as

    (x_q, x_scale, x_zero) = DynamicQuantizeLinear(x)
    y = Cast(MatMulInteger(x_q, W_q, x_zero, W_zero)) * (x_scale * W_scale)

and the kernel that runs MatMulInteger differs by CPU. With VNNI (and on ARM) it sums u8 x s8
products in int32; on AVX2 without VNNI it sums pairs of them in int16, which saturates when the
weights use the whole int8 range (255 x 127 x 2 > 32767). A graph quantized without
`reduce_range` therefore answers differently by machine: seed 002's example read 0.727 with
VNNI and 0.483 on AVX2. Here each such matmul becomes

    y = x @ ((W_q - W_zero) * W_scale)

in float32, the weights dequantized exactly once. Float32 matmuls still differ between CPUs in
their last bits (the order of the sums), never by a saturated term, so a decision moves only for
an answer within rounding of 0.5. Gathers of quantized embedding rows followed by
DequantizeLinear are exact on every CPU and are kept: dequantizing the table would cost
128k x 384 floats for nothing.

The graph's fixed sequence length is freed too where the graph allows it (`free_sequence`), so
a batch is padded to its longest row instead of to the length the exporter traced.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx


def _inputs(node: onnx.NodeProto) -> Iterator[str]:
    """The values a node reads, those read inside its subgraphs (If, Loop) included."""
    import onnx

    yield from node.input
    for attribute in node.attribute:
        graphs = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)
        for graph in graphs:
            for inner in graph.node:
                yield from _inputs(inner)


def quantized_matmuls(model: onnx.ModelProto) -> int:
    return sum(node.op_type == "MatMulInteger" for node in model.graph.node)


def dequantized(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every dynamically quantized matmul on a constant weight in float32.

    A MatMulInteger that does not have the shape above (a weight computed at run time, a
    zero point per column) raises ValueError naming the node: better no model than one that
    answers by CPU."""
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    constants = {t.name: t for t in graph.initializer}
    producer = {name: node for node in graph.node for name in node.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)

    def constant(name: str, node: onnx.NodeProto) -> np.ndarray:
        if name not in constants:
            raise ValueError(f"node {node.name!r}: {name!r} is not a constant weight; cannot make the graph float32")
        return numpy_helper.to_array(constants[name])

    replaced: dict[int, onnx.NodeProto] = {}  # id of the MatMulInteger -> its float MatMul
    dropped: set[int] = set()
    weights: list[onnx.TensorProto] = []
    for node in graph.node:
        if node.op_type != "MatMulInteger":
            continue
        x_q, w_q, _, w_zero = (*node.input, "", "")[:4]
        quantize = producer.get(x_q)
        chain = readers.get(node.output[0], [])
        cast = chain[0] if len(chain) == 1 and chain[0].op_type == "Cast" else None
        scale_mul = readers.get(cast.output[0], []) if cast is not None else []
        if (
            quantize is None
            or quantize.op_type != "DynamicQuantizeLinear"
            or cast is None
            or len(scale_mul) != 1
            or scale_mul[0].op_type != "Mul"
        ):
            raise ValueError(
                f"node {node.name!r}: a MatMulInteger not written by quantize_dynamic; cannot make the graph float32"
            )
        (mul,) = scale_mul
        scale_name = w_q.removesuffix("_quantized") + "_scale"
        scale = constant(scale_name, node)
        zero = constant(w_zero, node).astype(np.float32) if w_zero else np.float32(0)
        if np.ndim(scale) > 0 or np.ndim(zero) > 0:
            raise ValueError(
                f"node {node.name!r}: per-channel weight scales are not supported; cannot make the graph float32"
            )
        weight = ((constant(w_q, node).astype(np.float32) - zero) * scale).astype(np.float32)
        name = w_q.removesuffix("_quantized") + "_float32"
        weights.append(numpy_helper.from_array(weight, name))
        replaced[id(node)] = helper.make_node(
            "MatMul", [quantize.input[0], name], [mul.output[0]], name=f"{node.name or mul.output[0]}_float32"
        )
        dropped |= {id(cast), id(mul)}

    nodes = [replaced.get(id(n), n) for n in graph.node if id(n) not in dropped]
    # What nothing reads any longer (the activations' DynamicQuantizeLinear, the scale products)
    # goes, node by node, until only what the outputs need is left.
    outputs = {o.name for o in graph.output}
    while True:
        read = {name for n in nodes for name in _inputs(n)} | outputs
        kept = [n for n in nodes if any(name in read for name in n.output)]
        if len(kept) == len(nodes):
            break
        nodes = kept
    del graph.node[:]
    graph.node.extend(nodes)
    kept_constants = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend([*kept_constants, *weights])
    return out


def free_sequence(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its inputs' second axis (the sequence) symbolic: it runs on any length the
    graph's own shapes allow. The caller checks that it does (a probe run) and keeps the fixed
    length otherwise."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    for value in out.graph.input:
        dims = value.type.tensor_type.shape.dim
        if len(dims) == 2:
            dims[1].ClearField("dim_value")
            dims[1].dim_param = "sequence"
    return out


def fixed_length(model: onnx.ModelProto) -> int | None:
    """The sequence length the graph's first input declares, None if it is symbolic."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return dims[1].dim_value if len(dims) == 2 and dims[1].HasField("dim_value") else None
