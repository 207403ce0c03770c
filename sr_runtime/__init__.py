"""vllm-srun: the decision-model runtime (heavy dependencies live in the `runtime` extra)."""

__version__ = "0.1.0"
