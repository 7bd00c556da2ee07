#!/usr/bin/env bash
# Builds a Python policy into a component with no imports:
#   guest/python/sdk/build-policy.sh POLICY_DIR OUT.wasm
# POLICY_DIR holds app.py (which ends `Policy = idem_policy.export(...)`).
# componentize-py is taken from $COMPONENTIZE_PY, else the toolchain venv.
#
# --stub-wasi replaces every WASI import with a trapping stub: the contract
# says a policy imports nothing, and the host refuses a component that does.
# The sources are copied to a scratch directory first because componentize-py
# writes __pycache__ beside every module it pre-initialises.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
wit="$(cd "$here/../../../wit" && pwd)"
policy="$(cd "$1" && pwd)"
out="$(realpath -m "$2")"
tool="${COMPONENTIZE_PY:-/var/tmp/idem-toolchains/python/bin/componentize-py}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/app" "$scratch/sdk"
cp "$policy"/*.py "$scratch/app/"
# Only the SDK's policy-side modules: the native host replica (_host, cases)
# has no business inside a component.
mkdir "$scratch/sdk/idem_policy"
cp "$here"/idem_policy/*.py "$scratch/sdk/idem_policy/"
rm -f "$scratch/sdk/idem_policy/cases.py"
# Unset so componentize-py does not append a venv's site-packages to the path.
env -u VIRTUAL_ENV "$tool" -q -d "$wit" -w idempotency-policy componentize --stub-wasi \
  -p "$scratch/app" -p "$scratch/sdk" app -o "$out"
echo "$out"
