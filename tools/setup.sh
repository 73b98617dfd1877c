#!/usr/bin/env bash
# `make setup`: the project's virtualenv plus the real tools of the embedded environment,
# each pinned in tools/versions.env and cached by version outside the work tree
# (default ~/.cache/twc/tools/<name>-<version>/), then linked into .twc/bin, which the
# Makefile puts first on PATH. `tools/setup.sh test` (`make test`) adds what only the
# tests use: helm, actionlint and Debian's PostgreSQL 15.
#
# It first checks the prerequisites (Go 1.26.6 or a later 1.26, python3 with venv, make,
# disk space for a cold build) and stops with one line naming what to install.
#
# For each tool: a binary already in the cache or on PATH at the pinned version is
# used; otherwise an official release download is tried (real users' machines);
# otherwise the tool is built from its Go module (one tool per step, CGO_ENABLED=0,
# progress lines while it builds). A warm run finishes in seconds.
#
# Usage: tools/setup.sh [test | venv|pulumi|kubernetes|temporal|etcd|kube-apiserver
#                        |kube-controller-manager|kubectl|kube-scheduler|kwok|postgres|helm|actionlint ...]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=versions.env
. "$ROOT/tools/versions.env"

CACHE="${TWC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/twc}"
TOOLS="$CACHE/tools"
LOGS="$CACHE/logs"
BUILD="$CACHE/build"
BIN="$ROOT/.twc/bin"
PYTHON="${PYTHON:-python3}"
mkdir -p "$TOOLS" "$LOGS" "$BUILD" "$BIN"

export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="-mod=readonly"
# Module and build caches stay outside the work tree (Go's defaults already are).

say() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { say "error: $*" >&2; exit 1; }

GO_MIN=1.26.6     # the newest `go` line of tools/go/*/go.mod; GOTOOLCHAIN=local fetches none
DISK_GB=16        # Go's module and build caches after a cold build of every tool

# check_prerequisites STEP...: stop with one line naming what is missing.
check_prerequisites() {
  local have
  command -v make >/dev/null || die "make is missing: apt-get install make"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
    || die "$PYTHON 3.11 or newer is missing: apt-get install python3"
  case " $* " in *" venv "*)
    "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null \
      || die "$PYTHON cannot make a virtualenv: apt-get install python3-venv" ;;
  esac
  command -v go >/dev/null || die "go is missing: install Go $GO_MIN or a later 1.26 (go.dev/dl) and put it on PATH"
  have=$(go env GOVERSION | sed 's/^go//')
  case $have in
    1.26|1.26.*) [ "$(printf '%s\n' "$GO_MIN" "$have" | sort -V | head -n1)" = "$GO_MIN" ] ;;
    *) false ;;
  esac || die "go $have cannot build the tools under GOTOOLCHAIN=local: install Go $GO_MIN or a later 1.26"
}

# need_build_space: before the first Go build of a run, check the disk holding Go's caches.
need_build_space() {
  [ -z "${SPACE_CHECKED:-}" ] || return 0
  SPACE_CHECKED=1
  local dir free
  dir=$(go env GOCACHE)
  mkdir -p "$dir"
  free=$(df -Pk "$dir" | awk 'NR == 2 {print int($4 / 1048576)}')
  [ "$free" -ge "$DISK_GB" ] || die "$free GB free where Go caches builds ($dir): a cold build needs about $DISK_GB GB"
}

# run_logged NAME CMD...: run a long step with its output in a log file, printing a
# progress line every 30 seconds; on failure print the log's tail and stop.
run_logged() {
  local name=$1; shift
  local log="$LOGS/$name.log" start now pid
  start=$(date +%s)
  "$@" >"$log" 2>&1 &
  pid=$!
  local next=$((start + 30))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    now=$(date +%s)
    if [ "$now" -ge "$next" ]; then
      say "  $name: still working ($((now - start)) s, log $log)"
      next=$((now + 30))
    fi
  done
  if ! wait "$pid"; then
    tail -n 40 "$log" >&2
    die "$name failed after $(( $(date +%s) - start )) s (full log: $log)"
  fi
  LAST_SECONDS=$(( $(date +%s) - start ))
}

# try_download URL DEST: fetch an official release archive if this machine reaches it.
try_download() {
  [ "${TWC_NO_DOWNLOAD:-}" = 1 ] && return 1
  command -v curl >/dev/null || return 1
  curl -fsSL --connect-timeout 5 --max-time 300 -o "$2" "$1" 2>/dev/null
}

# module_dir MODULE@VERSION: download a Go module and print its directory.
module_dir() {
  go mod download -json "$1" | "$PYTHON" -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error","no Dir")))'
}

link_tool() {  # link_tool DIR: link every binary of a cached tool into .twc/bin
  local f
  for f in "$1"/bin/*; do case $f in *.py) continue ;; esac; ln -sfn "$f" "$BIN/$(basename "$f")"; done
}

record_build() {  # record_build DIR SECONDS: keep the cold build time next to the tool
  echo "$2" >"$1/BUILD_SECONDS"
  say "  built in $2 s"
}

# ---------------------------------------------------------------------------
setup_venv() {
  local stamp want
  want=$(cat "$ROOT/requirements.txt" "$ROOT/requirements-dev.txt" "$ROOT/pyproject.toml" 2>/dev/null \
    | sha256sum | cut -c1-16)-$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  stamp="$ROOT/.venv/.twc-stamp"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    say "venv: up to date"
    return
  fi
  say "venv: installing requirements-dev.txt into .venv"
  [ -x "$ROOT/.venv/bin/python" ] || "$PYTHON" -m venv "$ROOT/.venv"
  run_logged venv sh -c "'$ROOT/.venv/bin/pip' install -q --upgrade pip \
    && '$ROOT/.venv/bin/pip' install -q -r '$ROOT/requirements-dev.txt' \
    && { [ ! -f '$ROOT/pyproject.toml' ] || '$ROOT/.venv/bin/pip' install -q --no-deps -e '$ROOT'; }"
  echo "$want" >"$stamp"
  say "venv: ready in $LAST_SECONDS s"
}

# ---------------------------------------------------------------------------
setup_pulumi() {
  local dir="$TOOLS/pulumi-$PULUMI_VERSION" sdk
  if [ -x "$dir/bin/pulumi" ] && "$dir/bin/pulumi" version 2>/dev/null | grep -qx "v$PULUMI_VERSION"; then
    say "pulumi $PULUMI_VERSION: cached"
  else
    mkdir -p "$dir/bin"
    local have
    have=$(command -v pulumi || true)
    if [ -n "$have" ] && [ "$(dirname "$(readlink -f "$have")")" != "$BIN" ] \
      && "$have" version 2>/dev/null | grep -qx "v$PULUMI_VERSION"; then
      say "pulumi $PULUMI_VERSION: using $have"
      cp -a "$(dirname "$have")"/pulumi* "$dir/bin/"
    elif try_download "https://get.pulumi.com/releases/sdk/pulumi-v$PULUMI_VERSION-linux-x64.tar.gz" \
      "$BUILD/pulumi.tgz"; then
      say "pulumi $PULUMI_VERSION: official release"
      tar -xzf "$BUILD/pulumi.tgz" -C "$dir/bin" --strip-components=1 && touch "$dir/OFFICIAL"
    else
      need_build_space
      say "pulumi $PULUMI_VERSION: building the CLI from github.com/pulumi/pulumi/pkg/v3"
      (cd "$ROOT/tools/go/pulumi" && run_logged pulumi go build -trimpath -tags osusergo,grpcnotrace \
        -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" \
        -o "$dir/bin/pulumi.tmp" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi \
        && mv "$dir/bin/pulumi.tmp" "$dir/bin/pulumi" && record_build "$dir" "$LAST_SECONDS")
    fi
  fi
  # The helper scripts ship inside the sdk module; module zips drop the executable bit.
  if [ ! -x "$dir/bin/pulumi-resource-pulumi-python" ]; then
    sdk=$(module_dir "github.com/pulumi/pulumi/sdk/v3@v$PULUMI_VERSION")
    install -m 0755 "$sdk/python/cmd/pulumi-language-python-exec" "$dir/bin/"
    install -m 0755 "$sdk/python/dist/pulumi-resource-pulumi-python" "$dir/bin/"
  fi
  if [ ! -f "$dir/OFFICIAL" ]; then
    # The Go language host (github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3)
    # has no tags of its own and no version of it is served here, so it cannot be built.
    # tools/langhost implements the same LanguageRuntime gRPC contract in Python on top of
    # the SDK's generated stubs and runs programs through the SDK's own
    # pulumi-language-python-exec, as the Go host does. It sits next to the CLI, where the
    # CLI looks for bundled language hosts (no "from $PATH" warning).
    install -m 0644 "$ROOT/tools/langhost/pulumi_language_python.py" "$dir/bin/"
    install -m 0755 "$ROOT/tools/langhost/pulumi-language-python" "$dir/bin/"
  fi
  link_tool "$dir"
}

# ---------------------------------------------------------------------------
setup_kubernetes_provider() {
  local v=$PULUMI_KUBERNETES_VERSION dir src sdk work
  dir="$TOOLS/pulumi-resource-kubernetes-$v"
  if [ -x "$dir/bin/pulumi-resource-kubernetes" ]; then
    say "pulumi-resource-kubernetes $v: cached"
  elif try_download "https://api.pulumi.com/releases/plugins/pulumi-resource-kubernetes-v$v-linux-amd64.tar.gz" \
    "$BUILD/kubernetes.tgz"; then
    mkdir -p "$dir/bin" && tar -xzf "$BUILD/kubernetes.tgz" -C "$dir/bin"
    say "pulumi-resource-kubernetes $v: official release"
  else
    need_build_space
    say "pulumi-resource-kubernetes $v: building from github.com/pulumi/pulumi-kubernetes/provider/v4"
    src=$(module_dir "github.com/pulumi/pulumi-kubernetes/provider/v4@$PULUMI_KUBERNETES_MODULE_VERSION")
    sdk=$(module_dir "github.com/pulumi/pulumi-kubernetes/sdk/v4@$PULUMI_KUBERNETES_SDK_VERSION")
    # Lay the two modules out as in the upstream repository (provider/ beside sdk/) so the
    # provider's own `replace sdk/v4 => ../sdk` holds, in a writable copy: main.go embeds
    # files that generate.go writes and the module zip lacks.
    work="$BUILD/pulumi-kubernetes-$v"
    rm -rf "$work" && mkdir -p "$work" && cp -r "$src" "$work/provider" && cp -r "$sdk" "$work/sdk"
    chmod -R u+w "$work"
    mkdir -p "$dir/bin"
    (cd "$work/provider/cmd/pulumi-resource-kubernetes" \
      && run_logged kubernetes-generate env VERSION="$v" go run generate.go \
      && cd "$work/provider" \
      && run_logged kubernetes go build -trimpath \
        -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$v" \
        -o "$dir/bin/pulumi-resource-kubernetes.tmp" ./cmd/pulumi-resource-kubernetes \
      && mv "$dir/bin/pulumi-resource-kubernetes.tmp" "$dir/bin/pulumi-resource-kubernetes" \
      && record_build "$dir" "$LAST_SECONDS")
    rm -rf "$work"
  fi
  # Resource plugins go to Pulumi's plugin cache, where the CLI finds them by version
  # (an ambient plugin on PATH would draw a warning on every run).
  local plugins="${PULUMI_HOME:-$HOME/.pulumi}/plugins/resource-kubernetes-v$v"
  mkdir -p "$plugins"
  ln -sfn "$dir/bin/pulumi-resource-kubernetes" "$plugins/pulumi-resource-kubernetes"
}

# ---------------------------------------------------------------------------
# build_wrapped NAME VERSION PACKAGE BINARY LDFLAGS [WRAPPER]: build a tool through its
# wrapper module under tools/go/WRAPPER (default NAME).
build_wrapped() {
  local name=$1 v=$2 pkg=$3 binary=$4 ldflags=$5 wrapper=${6:-$1} dir
  dir="$TOOLS/$name-$v"
  if [ -x "$dir/bin/$binary" ]; then
    say "$name $v: cached"
  else
    need_build_space
    say "$name $v: building $pkg"
    mkdir -p "$dir/bin"
    (cd "$ROOT/tools/go/$wrapper" && run_logged "$name" go build -trimpath -ldflags "-s -w $ldflags" \
      -o "$dir/bin/$binary.tmp" "$pkg" \
      && mv "$dir/bin/$binary.tmp" "$dir/bin/$binary" && record_build "$dir" "$LAST_SECONDS")
  fi
  link_tool "$dir"
}

setup_temporal() {
  local have
  have=$(command -v temporal || true)
  if [ ! -x "$TOOLS/temporal-$TEMPORAL_CLI_VERSION/bin/temporal" ] && [ -n "$have" ] \
    && "$have" --version 2>/dev/null | grep -q "temporal version $TEMPORAL_CLI_VERSION "; then
    mkdir -p "$TOOLS/temporal-$TEMPORAL_CLI_VERSION/bin" && cp "$have" "$TOOLS/temporal-$TEMPORAL_CLI_VERSION/bin/"
  fi
  build_wrapped temporal "$TEMPORAL_CLI_VERSION" github.com/temporalio/cli/cmd/temporal temporal \
    "-X github.com/temporalio/cli/temporalcli.Version=$TEMPORAL_CLI_VERSION"
}

setup_etcd() {
  build_wrapped etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 etcd ""
}

k8s_ldflags() {
  local v=$KUBERNETES_VERSION
  echo "-X k8s.io/component-base/version.gitVersion=v$v -X k8s.io/component-base/version.gitMajor=1" \
    "-X k8s.io/component-base/version.gitMinor=$(echo "$v" | cut -d. -f2)" \
    "-X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
}

setup_kube_apiserver() {
  build_wrapped kube-apiserver "$KUBERNETES_VERSION" k8s.io/kubernetes/cmd/kube-apiserver \
    kube-apiserver "$(k8s_ldflags)"
}

# The real Deployment, ReplicaSet and StatefulSet controllers, garbage collector and
# namespace controller (`twc local up` runs only those it needs).
setup_kube_controller_manager() {
  build_wrapped kube-controller-manager "$KUBERNETES_VERSION" \
    k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager "$(k8s_ldflags)" kube-apiserver
}

# kubectl, for people and the end-to-end tests (`kubectl apply`, `kubectl get
# temporalworkers`); same wrapper module, so it shares the build cache with the two above.
setup_kubectl() {
  build_wrapped kubectl "$KUBERNETES_VERSION" k8s.io/kubernetes/cmd/kubectl kubectl \
    "$(k8s_ldflags)" kube-apiserver
}

# PostgreSQL 15 from Debian 12's packages, for the tests and `twc local up --state
# postgres` only, which run it as the Pulumi state backend (its own data dir under .twc/,
# started by twc, never a system service). Installed here when missing (root or sudo).
setup_postgres() {
  local bin=/usr/lib/postgresql/15/bin
  if [ -x "$bin/postgres" ] && [ -x "$bin/initdb" ]; then
    say "postgresql 15: $("$bin/postgres" --version | awk '{print $3}') installed"
    return
  fi
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "postgresql-15 is missing: apt-get install postgresql-15 (Debian 12), or run setup as root"
    sudo="sudo"
  fi
  say "postgresql 15: installing Debian's postgresql-15"
  # No cluster of the package's own: twc makes and starts its own data dir.
  $sudo mkdir -p /etc/postgresql-common
  echo "create_main_cluster = false" | $sudo tee /etc/postgresql-common/createcluster.conf >/dev/null
  grep -qx 'VERSION_ID="12"' /etc/os-release 2>/dev/null \
    || die "postgresql-15 is missing: install PostgreSQL 15 into $bin (Debian 12's postgresql-15 package)"
  run_logged postgres sh -c "$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
    -o Dpkg::Options::=--force-confold --no-install-recommends postgresql-15"
  [ -x "$bin/postgres" ] || die "postgresql-15 installed, but $bin/postgres is missing"
  say "postgresql 15: installed in $LAST_SECONDS s"
}

# ---------------------------------------------------------------------------
# helm, for the daemon's chart (deploy/chart): `helm lint` and `helm template` in the
# tests, `helm install` for users. Built through its wrapper module (committed go.sum);
# the version ldflag is what `helm version` prints.
setup_helm() {
  build_wrapped helm "$HELM_VERSION" helm.sh/helm/v4/cmd/helm helm \
    "-X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
}

# actionlint, which checks the GitHub workflows in .github/workflows (a test runs it).
# Built inside a wrapper module, so the module version it would read from its build info
# is the wrapper's: the ldflag sets the real one.
setup_actionlint() {
  build_wrapped actionlint "$ACTIONLINT_VERSION" github.com/rhysd/actionlint/cmd/actionlint \
    actionlint "-X github.com/rhysd/actionlint.version=v$ACTIONLINT_VERSION"
}

# ---------------------------------------------------------------------------
# The simulated cluster's scheduling and nodes: the real kube-scheduler places pods on
# KWOK's simulated nodes, and KWOK plays their kubelets (pods turn Running and Ready).

# kube-scheduler: same wrapper module as kube-apiserver, so it shares its build cache.
setup_kube_scheduler() {
  build_wrapped kube-scheduler "$KUBERNETES_VERSION" k8s.io/kubernetes/cmd/kube-scheduler \
    kube-scheduler "$(k8s_ldflags)" kube-apiserver
}

# kwok: sigs.k8s.io/kwok/cmd/kwok through its own wrapper module (no replace directives).
setup_kwok() {
  build_wrapped kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok kwok \
    "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
}

# ---------------------------------------------------------------------------
main() {
  local steps=("$@") t0
  local environment=(venv pulumi kubernetes temporal etcd kube-apiserver kube-controller-manager kubectl
    kube-scheduler kwok)
  case "${1:-}" in
    "") steps=("${environment[@]}") ;;
    test) steps=("${environment[@]}" helm actionlint postgres) ;;
  esac
  check_prerequisites "${steps[@]}"
  t0=$(date +%s)
  for step in "${steps[@]}"; do
    case $step in
      venv) setup_venv ;;
      pulumi) setup_pulumi ;;
      kubernetes) setup_kubernetes_provider ;;
      temporal) setup_temporal ;;
      etcd) setup_etcd ;;
      kube-apiserver) setup_kube_apiserver ;;
      kube-controller-manager) setup_kube_controller_manager ;;
      kubectl) setup_kubectl ;;
      postgres) setup_postgres ;;
      helm) setup_helm ;;
      actionlint) setup_actionlint ;;
      kube-scheduler) setup_kube_scheduler ;;
      kwok) setup_kwok ;;
      *) die "unknown step '$step'" ;;
    esac
  done
  say "done in $(( $(date +%s) - t0 )) s; tools in $BIN (cache $TOOLS)"
}

main "$@"
