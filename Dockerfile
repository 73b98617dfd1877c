# The twc image: the project at /app with its virtualenv, and the tools `twc run` needs at
# run time — the Pulumi CLI with its Python language host (no other language's), and the
# Kubernetes provider plugin. The daemon's chart (deploy/chart) runs it. Build it from the repository root:
#
#   docker build --platform linux/amd64 -t registry.example/twc:0.1.0 .
#
# The tools come from tools/setup.sh, pinned in tools/versions.env: it takes the official
# release archives where they can be downloaded and otherwise builds them from their Go
# modules. The ARGs below repeat the pins so the image says what it holds; the build
# fails if they disagree with tools/versions.env (a unit test checks that too).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG GO_IMAGE=golang:1.26-bookworm

# --- the pinned tools ------------------------------------------------------------------
FROM ${GO_IMAGE} AS tools
ARG PULUMI_VERSION=3.260.0
ARG PULUMI_KUBERNETES_VERSION=4.25.0
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY tools/ tools/
ENV TWC_CACHE_DIR=/opt/twc-cache PULUMI_HOME=/opt/pulumi PYTHON=python3
RUN want="$PULUMI_VERSION $PULUMI_KUBERNETES_VERSION" \
    && . tools/versions.env \
    && { [ "$want" = "$PULUMI_VERSION $PULUMI_KUBERNETES_VERSION" ] \
         || { echo "Dockerfile pins $want, tools/versions.env $PULUMI_VERSION $PULUMI_KUBERNETES_VERSION" >&2; exit 1; }; } \
    && bash tools/setup.sh pulumi kubernetes \
    && mkdir -p /out/bin /out/plugins/resource-kubernetes-v${PULUMI_KUBERNETES_VERSION} \
    && cd /opt/twc-cache/tools/pulumi-${PULUMI_VERSION}/bin \
    && cp -L pulumi pulumi-language-python pulumi-language-python-exec pulumi-resource-pulumi-python \
        $(ls pulumi_language_python.py 2>/dev/null) /out/bin/ \
    && cp -L /opt/twc-cache/tools/pulumi-resource-kubernetes-${PULUMI_KUBERNETES_VERSION}/bin/pulumi-resource-kubernetes \
        /out/plugins/resource-kubernetes-v${PULUMI_KUBERNETES_VERSION}/ \
    && /out/bin/pulumi version | grep -qx "v${PULUMI_VERSION}"

# --- the image -------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG PULUMI_VERSION=3.260.0
ARG PULUMI_KUBERNETES_VERSION=4.25.0
LABEL org.opencontainers.image.title="twc" \
      org.opencontainers.image.description="Temporal worker fleets on Kubernetes: the twc daemon" \
      io.twc.pulumi-version="${PULUMI_VERSION}" \
      io.twc.pulumi-kubernetes-version="${PULUMI_KUBERNETES_VERSION}"

# The chart runs the daemon as this user (runAsUser 10001); it owns the project
# directory (the engine writes Pulumi.<stack>.yaml there) and PULUMI_HOME (the CLI's
# workspace settings), so everything below is created or copied as it.
RUN groupadd --gid 10001 twc && useradd --uid 10001 --gid 10001 --home-dir /home/twc --create-home twc \
    && install -d -o 10001 -g 10001 /app /opt/pulumi

ENV PULUMI_HOME=/opt/pulumi \
    PULUMI_SKIP_UPDATE_CHECK=true \
    PULUMI_DIY_BACKEND_NO_LEGACY_WARNING=true \
    PATH=/app/.venv/bin:/opt/pulumi/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1

COPY --from=tools --chown=10001:10001 /out/bin/ /opt/pulumi/bin/
COPY --from=tools --chown=10001:10001 /out/plugins/ /opt/pulumi/plugins/

USER 10001:10001
WORKDIR /app
# Dependencies first, so a code change reuses this layer.
COPY --chown=10001:10001 requirements.txt ./
RUN python -m venv /app/.venv \
    && /app/.venv/bin/pip install --no-cache-dir -r requirements.txt \
    && /app/.venv/bin/python -c "import importlib.metadata as m; \
assert m.version('pulumi') == '${PULUMI_VERSION}', m.version('pulumi'); \
assert m.version('pulumi-kubernetes') == '${PULUMI_KUBERNETES_VERSION}', m.version('pulumi-kubernetes')"

# The Pulumi project itself: the program, its providers, the twc package and the stacks'
# config files (Pulumi.<stack>.yaml). The Automation API runs it from /app (Pulumi.yaml's
# virtualenv is /app/.venv), so it is installed editable, as `make setup` installs it.
COPY --chown=10001:10001 pyproject.toml README.md __main__.py ./
COPY --chown=10001:10001 Pulumi*.yaml ./
COPY --chown=10001:10001 twc/ twc/
COPY --chown=10001:10001 providers/ providers/
RUN /app/.venv/bin/pip install --no-cache-dir --no-deps -e .

ENTRYPOINT ["twc"]
CMD ["--help"]
