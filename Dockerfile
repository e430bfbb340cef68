# The gateway's container image (docs/deploy.md). Build from the repository root:
#   docker build -t model-gateway:0.1.0 .
# Run:        docker run --env-file .env -p 8080:8080 model-gateway:0.1.0
# Migrate:    docker run --env-file .env model-gateway:0.1.0 migrate   (before a new version)
# Pin the base by digest in production (python:3.11-slim-bookworm@sha256:...).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: the locked dependencies (hashes checked) and the package, into one venv -----------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/gateway
WORKDIR /src
# The lock alone first: this layer is rebuilt only when the lock changes.
COPY requirements/runtime.lock.txt requirements/runtime.lock.txt
RUN /opt/gateway/bin/python -m pip install --require-hashes -r requirements/runtime.lock.txt
COPY pyproject.toml README.md ./
COPY protocol protocol
COPY storage storage
COPY services services
COPY actors actors
COPY gateway gateway
COPY bench bench
# The package itself, without deps: everything it needs is in the lock (as `make install`).
RUN /opt/gateway/bin/python -m pip install --no-deps --no-build-isolation . \
 && /opt/gateway/bin/python -m pip uninstall --yes pip

# --- run: the venv, a non-root user, nothing else ---------------------------------------------
FROM ${PYTHON_IMAGE}
COPY --from=build /opt/gateway /opt/gateway
RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid gateway --home-dir /var/lib/gateway --no-create-home \
      --shell /usr/sbin/nologin gateway \
 && install -d -o gateway -g gateway -m 0700 /var/lib/gateway
ENV PATH=/opt/gateway/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GATEWAY_HOST=0.0.0.0 \
    GATEWAY_PORT=8080 \
    GATEWAY_DATA_DIR=/var/lib/gateway
# The data dir holds only per-instance state (docs/operations.md, "The data dir"): with
# PostgreSQL, S3 and GATEWAY_MASTER_KEY set, nothing in it needs keeping.
VOLUME ["/var/lib/gateway"]
WORKDIR /var/lib/gateway
USER 10001:10001
EXPOSE 8080
# /healthz (= /readyz): 503 while draining or broken, no I/O. No curl in a slim image: the
# stdlib's urllib, which raises (exit 1) on a refused connection and on any non-2xx answer.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('GATEWAY_PORT', '8080') + '/healthz', timeout=4)"]
# Exec form: the gateway is PID 1 and gets SIGTERM itself (it drains, then exits 0).
# `serve` applies pending migrations too, but run `migrate` first as its own step (one process,
# before any instance of the new version starts): a failed migration then stops the deploy.
ENTRYPOINT ["gateway"]
CMD ["serve"]
