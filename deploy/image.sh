#!/usr/bin/env bash
# Build dpsynth's image from deploy/Dockerfile with podman (or docker where an engine answers):
#
#   bash deploy/image.sh build      # `make image`
#   bash deploy/image.sh engine     # the engine it would use (exit 1, naming packages, if none)
#   bash deploy/image.sh base       # the base image it would use (made locally when needed)
#   bash deploy/image.sh digest     # digest of the sources the image is built from (its label
#                                   # dpsynth.source-digest: tests refuse an older image)
#
# The base (build argument PYTHON_IMAGE, the Dockerfile is the same for both):
#   - DPSYNTH_PYTHON_IMAGE when set;
#   - else the registry image docker.io/library/python:3.12-slim, when present or pullable;
#   - else a Debian bookworm base made here: `debootstrap --variant=minbase` with python3,
#     python3-venv, python-is-python3 and ca-certificates, imported as localhost/dpsynth-base:
#     bookworm. Its root file system is cached as a tarball in ~/.cache/dpsynth/base/
#     (DPSYNTH_CACHE_DIR), so a machine whose image store was wiped imports it again in seconds;
#     DPSYNTH_BASE_REFRESH=1 makes it anew (Debian's security updates).
#
# The host's pip settings reach the build at build time only, as secret mounts (never a layer,
# a build argument or a file of the repository): the CA bundle pip trusts (PIP_CERT, pip's
# `cert`, else REQUESTS_CA_BUNDLE / SSL_CERT_FILE, else Debian's bundle) and the index settings of
# `pip config list` (PIP_INDEX_URL, pip.conf ...); PIP_FIND_LINKS folders are mounted read-only
# into the build (podman only). Proxy variables (HTTP(S)_PROXY) are passed by the engines
# themselves.
#
# Settings: DPSYNTH_IMAGE (default dpsynth:0.1.0), DPSYNTH_CONTAINER_ENGINE (podman | docker),
# DPSYNTH_PULL_TIMEOUT_S (60), DPSYNTH_DEBIAN_MIRROR (http://deb.debian.org/debian),
# CONTAINERS_CONF (podman; the Makefile sets deploy/containers.conf).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE=${DPSYNTH_IMAGE:-dpsynth:0.1.0}
REGISTRY_BASE=docker.io/library/python:3.12-slim
LOCAL_BASE=localhost/dpsynth-base:bookworm
CACHE=${DPSYNTH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dpsynth}/base
PACKAGES="podman runc debootstrap"

say() { printf 'image.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# ---- the engine ---------------------------------------------------------------------------
engine() {
  case "${DPSYNTH_CONTAINER_ENGINE:-}" in
    podman|docker) echo "$DPSYNTH_CONTAINER_ENGINE"; return ;;
    "") ;;
    *) die "DPSYNTH_CONTAINER_ENGINE must be podman or docker (got '$DPSYNTH_CONTAINER_ENGINE')" ;;
  esac
  if command -v podman >/dev/null 2>&1; then echo podman; return; fi
  # a docker client alone is not enough: the engine must answer
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then echo docker; return; fi
  die "no container engine: install podman (Debian: apt-get install $PACKAGES) or start Docker"
}

# ---- the base -----------------------------------------------------------------------------
base_rootfs_tar() {  # the cached root file system of the local base, made when missing
  local tar="$CACHE/bookworm-minbase.tar" tmp
  if [[ -s $tar && -z ${DPSYNTH_BASE_REFRESH:-} ]]; then echo "$tar"; return; fi
  command -v debootstrap >/dev/null 2>&1 \
    || die "no registry base and no debootstrap to make one: apt-get install $PACKAGES"
  [[ $(id -u) == 0 ]] || die "debootstrap needs root to make the local base image"
  mkdir -p "$CACHE"
  tmp=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  say "making the local base: debootstrap bookworm into $tmp (a few minutes, once)"
  local start=$SECONDS
  debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    bookworm "$tmp" "${DPSYNTH_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$CACHE/debootstrap.log" 2>&1 \
    || { rm -rf "$tmp"; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
  rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/* "$tmp"/var/log/*.log
  tar -C "$tmp" --numeric-owner -cf "$tar.part" . && mv "$tar.part" "$tar"
  rm -rf "$tmp"
  say "local base root file system: $tar ($(du -h "$tar" | cut -f1), $((SECONDS - start)) s)"
  echo "$tar"
}

base() {
  local eng=$1
  if [[ -n ${DPSYNTH_PYTHON_IMAGE:-} ]]; then echo "$DPSYNTH_PYTHON_IMAGE"; return; fi
  if "$eng" image inspect "$REGISTRY_BASE" >/dev/null 2>&1; then echo "$REGISTRY_BASE"; return; fi
  if [[ -z ${DPSYNTH_BASE_REFRESH:-} ]] && "$eng" image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
    echo "$LOCAL_BASE"; return  # made before: no registry here (do not ask it again)
  fi
  if timeout "${DPSYNTH_PULL_TIMEOUT_S:-60}" "$eng" pull -q "$REGISTRY_BASE" >/dev/null 2>&1; then
    echo "$REGISTRY_BASE"; return
  fi
  say "$REGISTRY_BASE cannot be pulled: building on a local Debian bookworm base"
  local tar
  tar=$(base_rootfs_tar)
  "$eng" import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    "$tar" "$LOCAL_BASE" >/dev/null
  echo "$LOCAL_BASE"
}

# ---- the host's pip settings, as build secrets --------------------------------------------
ca_bundle() {
  local candidate
  for candidate in "${PIP_CERT:-}" "$(pip_setting cert)" "${REQUESTS_CA_BUNDLE:-}" \
                   "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
    if [[ -n $candidate && -s $candidate ]]; then echo "$candidate"; return; fi
  done
}

pip_config_list() {  # the host pip's merged settings (files and PIP_* variables), or nothing
  local python=${PYTHON:-python3}
  "$python" -m pip config list 2>/dev/null || true
}

pip_setting() {  # one setting of pip_config_list ('' when unset); the environment wins
  pip_config_list | sed -n "s/^[^=]*\.$1='\(.*\)'\$/\1/p" | tail -n 1
}

# Writes a pip.conf with the host's index settings (an allow-list: paths of the host such as
# `cert` or a constraints file mean nothing inside the build) and prints the podman/docker
# arguments that mount it, the CA bundle and the find-links folders.
pip_build_args() {
  local eng=$1 dir=$2 conf="$2/pip.conf" line key value links="" ca
  printf '[global]\n' >"$conf"
  while IFS= read -r line; do
    key=${line%%=*}; key=${key##*.}; value=${line#*=}; value=${value#\'}; value=${value%\'}
    case $key in
      index-url|extra-index-url|trusted-host|default-timeout|timeout|retries|proxy|no-index|\
      prefer-binary|only-binary|no-binary|pre)
        printf '%s = %s\n' "$key" "$value" >>"$conf" ;;
      find-links) links="$links $value" ;;
    esac
  done < <(pip_config_list)
  echo "--secret=id=pip-conf,src=$conf"
  ca=$(ca_bundle)
  [[ -n $ca ]] && echo "--secret=id=pip-ca,src=$ca"
  local found=""
  for value in $links; do
    if [[ -d $value && $eng == podman ]]; then
      echo "--volume=$value:$value:ro"; found="$found $value"
    elif [[ -d $value ]]; then
      say "find-links $value: not mounted ($eng build has no build-time volumes); the index serves"
    fi
  done
  [[ -n $found ]] && printf 'find-links =%s\n' "$found" >>"$conf"
  return 0
}

# The files the Dockerfile copies (as .dockerignore leaves them) and the Dockerfile itself.
digest() {
  (cd "$ROOT" && find pyproject.toml README.md deploy/Dockerfile operators schemas -type f \
      ! -path '*/__pycache__/*' ! -name '*.pyc' ! -name '*.nbi' ! -name '*.nbc' \
      ! -path '*.egg-info/*' -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}

build() {
  local eng base_image tmp start
  eng=$(engine)
  start=$SECONDS
  base_image=$(base "$eng")
  say "engine $eng, base $base_image ($((SECONDS - start)) s)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  local -a args
  mapfile -t args < <(pip_build_args "$eng" "$tmp")
  # podman: the docker image format, which keeps HEALTHCHECK (OCI has no field for it)
  [[ $eng == podman ]] && args+=(--format docker)
  start=$SECONDS
  (cd "$ROOT" && "$eng" build -f deploy/Dockerfile --build-arg "PYTHON_IMAGE=$base_image" \
     --label "dpsynth.source-digest=$(digest)" "${args[@]}" -t "$IMAGE" .)
  say "built $IMAGE in $((SECONDS - start)) s"
}

case "${1:-build}" in
  build) build ;;
  engine) engine ;;
  base) base "$(engine)" ;;
  digest) digest ;;
  *) die "usage: $0 build|engine|base|digest" ;;
esac
