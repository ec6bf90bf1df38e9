# syntax=docker/dockerfile:1
#
# l0gc image: `gcd` (sweeper: daemon, one-shot sweep, status) and `watermark` (publisher).
#
#   docker build -t l0gc:0.1.0 --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" .
#
# Runtime dependencies only (no dev tools, no Spark extras), at the exact versions of
# constraints.txt. Runs as uid/gid 65532 with a read-only root filesystem; the only
# writable path it needs is /tmp (mount an emptyDir there; the Helm chart does).
#
# The same base image (so the same Python) for both stages. Pin it by digest for
# releases: --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:<digest>
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- builder: a venv at /opt/l0gc, the same path as at run time (script shebangs) ---
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/l0gc
WORKDIR /src

# Dependencies first, from the two files that pin them: this layer is rebuilt only when
# the pins change, not on every source edit. The requirement list is the runtime
# [project].dependencies of pyproject.toml (no extras); every version comes from
# constraints.txt; wheels only, so no compiler is needed.
COPY pyproject.toml constraints.txt ./
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > /tmp/runtime-requirements.txt \
    && /opt/l0gc/bin/pip install --only-binary=:all: \
        --constraint constraints.txt --requirement /tmp/runtime-requirements.txt

# Then the package itself, without dependencies (they are all installed above): gcd and
# watermark only; the lab (l0lab/: demo, simulation, chaos) stays out of the image, where
# `gcd demo` & co. say so.
COPY README.md ./
COPY l0gc ./l0gc
COPY gcd ./gcd
COPY watermark ./watermark
RUN /opt/l0gc/bin/pip install --no-deps --no-compile . \
    && /opt/l0gc/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/l0gc \
    && /opt/l0gc/bin/gcd --help > /dev/null \
    && /opt/l0gc/bin/watermark --help > /dev/null

# --- runtime: the same Python, the venv, nothing else ---
FROM ${PYTHON_IMAGE} AS runtime

ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="l0gc" \
      org.opencontainers.image.description="Epoch-based garbage collector for temporary level-zero objects in object storage" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/l0gc/l0gc" \
      org.opencontainers.image.documentation="https://github.com/l0gc/l0gc/blob/main/docs/kubernetes.md"

# Byte code was compiled in the builder (unchecked-hash: never recompiled, never written),
# so nothing is written outside /tmp and the root filesystem can be read-only.
ENV PATH=/opt/l0gc/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONFAULTHANDLER=1 \
    HOME=/tmp

COPY --from=builder /opt/l0gc /opt/l0gc

# Numeric uid:gid, so Kubernetes can verify runAsNonRoot without an /etc/passwd entry.
USER 65532:65532
WORKDIR /tmp

# 9464: gcd daemon (/metrics /healthz /readyz); 8080: watermark serve (API and the same).
EXPOSE 9464 8080

# Exec form: the Python process is PID 1 and receives SIGTERM itself (the daemon drains
# its in-flight delete batches and exits). `watermark serve` overrides the entrypoint.
ENTRYPOINT ["gcd"]
CMD ["daemon"]
