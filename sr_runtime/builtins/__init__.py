"""Built-in models that run offline from wheels: `default` (embeddings) and `smollm2-135m`."""

from __future__ import annotations

BUILTINS = ("default", "smollm2-135m")
