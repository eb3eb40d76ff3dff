# syntax=docker/dockerfile:1
# gpupool: build a wheel (and its dependencies' wheels) in one stage, install only wheels in
# the final one, so no compiler or build tool ships in the image.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY webhook ./webhook
RUN pip wheel --no-cache-dir --wheel-dir /wheels --constraint constraints.txt .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 gpupool \
 && useradd --system --uid 10001 --gid gpupool --no-create-home --shell /usr/sbin/nologin gpupool
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels gpupool==0.1.0 \
 && rm -rf /wheels
# Runs with a read-only root filesystem: /tmp (metrics, worker heartbeats) is an emptyDir.
USER 10001:10001
EXPOSE 8443
# The agent DaemonSet overrides the command with `gpupool agent`.
ENTRYPOINT ["gpupool", "serve"]
