"""vllm-srun: the decision-model runtime (heavy dependencies live in the `runtime` extra)."""

import os

__version__ = "0.1.0"

# OpenMP threads that wait by spinning starve every other process on the cores they share: with
# Envoy, the sidecar and a client on the same 2 cores, a first batch of 64 states took 19.5 s on
# `default` with spinning threads and 2.1 s with passive ones (1.6 s on one thread). The runtime
# rarely has its cores to itself, so its threads sleep while they wait. Read by libgomp when
# torch loads, so it is set before any module imports torch; an operator's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
