"""MODEL as users give it: a built-in name or a checkpoint folder, loaded into an engine."""

from __future__ import annotations

from pathlib import Path

from sr_runtime.builtins import BUILTINS
from sr_runtime.errors import CheckpointError
from sr_runtime.types import DecisionEngine


def check_device(device: str) -> None:
    """A device torch can use here, before any weights move (torch would fail with a traceback)."""
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise CheckpointError(f"unknown device {device!r} (cpu, cuda, cuda:N)") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise CheckpointError(f"device {device!r} is not available: this torch build or machine has no CUDA GPU")
    if kind not in ("cpu", "cuda"):
        raise CheckpointError(f"unsupported device {device!r} (cpu, cuda, cuda:N)")


def check_model(model: str, max_model_len: int | None = None) -> str:
    """MODEL's served name (the built-in's, or the folder's) after the checks that load no weights."""
    if model in BUILTINS:
        return model
    path = Path(model)
    if not path.is_dir():
        raise CheckpointError(
            f"unknown model {model!r}: not a folder, and not a built-in ({', '.join(BUILTINS)}); "
            "give a built-in name or the path of a checkpoint folder"
        )
    from sr_runtime.checkpoint import read_checkpoint

    checkpoint = read_checkpoint(path)
    if max_model_len is not None:
        from sr_runtime.engine import resolve_max_length

        resolve_max_length(checkpoint.config, max_model_len)
    return path.name


def load_engine(
    model: str,
    *,
    device: str = "cpu",
    dtype: str = "auto",
    max_model_len: int | None = None,
    reference: bool = False,
    state_cache: bool = True,
    state_cache_bytes: int | None = None,
    token_budget: int | None = None,
    noul_model: Path | None = None,
    noul_threads: int | None = None,
) -> DecisionEngine:
    """Load MODEL; CheckpointError (one line) if it is neither a built-in nor a usable folder.

    `noul_model`: the model `default` reads noul questions with (an ONNX file or a Hugging Face
    sequence-classification folder); only `default` takes one. `noul_threads`: how many of its
    batches run side by side (None: as many as torch's math threads at the time). `dtype`: what
    a checkpoint's weights run in (sr_runtime/kernels.py); `default` runs its own ONNX models."""
    from sr_runtime.engine import DEFAULT_STATE_CACHE_BYTES, Engine

    check_device(device)
    name = check_model(model)
    if noul_model is not None and model != "default":
        raise CheckpointError(f"--noul-model is for the built-in 'default', not {model!r}")
    cache_bytes = (DEFAULT_STATE_CACHE_BYTES if state_cache_bytes is None else state_cache_bytes) if state_cache else 0
    options = {"state_cache_bytes": cache_bytes, "token_budget": token_budget}  # None: sized for the device
    if model == "default":
        from sr_runtime.builtins.embedding import EmbeddingEngine

        if reference:
            raise CheckpointError("--reference is the checkpoint models' whole-prompt path; 'default' has none")
        if dtype != "auto":
            raise CheckpointError(f"--dtype is for checkpoint models; 'default' runs its own ONNX models, not {dtype}")
        return EmbeddingEngine.load(device, max_model_len, noul_model, noul_threads)
    if model == "smollm2-135m":
        from sr_runtime.builtins import smollm2

        return Engine.load(
            smollm2.converted_folder(),
            name=smollm2.NAME,
            device=device,
            dtype=dtype,
            max_model_len=max_model_len,
            reference=reference,
            description="SmolLM2-135M-Instruct, zero-shot: LM head rows of option letters, causal",
            strengths=smollm2.STRENGTHS,
            **options,
        )
    return Engine.load(
        Path(model),
        name=name,
        device=device,
        dtype=dtype,
        max_model_len=max_model_len,
        reference=reference,
        **options,
    )
