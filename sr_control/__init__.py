"""vllm-sr: the control plane for System One decision-model APIs behind Envoy."""

__version__ = "0.1.0"
