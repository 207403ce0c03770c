"""Generated tables (see `vllm-sr schemas generate`)."""
