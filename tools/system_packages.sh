#!/usr/bin/env bash
# Install the Debian packages the project needs besides Python's (`make setup` runs it):
#
#     bash tools/system_packages.sh chromium [more packages ...]
#
# Does nothing when every package is installed. Otherwise, when the machine can (apt-get, and
# root or password-less sudo), runs `apt-get update` once and `apt-get install -y
# --no-install-recommends` for the missing ones; when it cannot, prints the one command to run.
# A package still missing afterwards fails the run under CI=true and is a warning otherwise
# (the tools that need it then say what they skip).
set -euo pipefail

missing=()
if command -v dpkg-query >/dev/null; then
    for package in "$@"; do
        status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
        [[ $status == "install ok installed" ]] || missing+=("$package")
    done
else
    echo "system_packages: no dpkg on this machine; install the equivalents of: $*" >&2
    exit 0
fi
[[ ${#missing[@]} -eq 0 ]] && exit 0

case "${CI:-}" in true | 1 | yes) ci=1 ;; *) ci=0 ;; esac
command="sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}"
give_up() {
    echo "system_packages: $1" >&2
    echo "system_packages: missing Debian packages: ${missing[*]}; install them with:" >&2
    echo "    $command" >&2
    if [[ $ci == 1 ]]; then
        echo "system_packages: CI=true: failing, since the checks need them" >&2
        exit 1
    fi
    echo "system_packages: WARNING: continuing without them; checks that need them are skipped" >&2
    exit 0
}

if [[ $(id -u) -eq 0 ]]; then
    sudo=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo)
else
    give_up "not root and no password-less sudo, so they cannot be installed here"
fi
command -v apt-get >/dev/null || give_up "no apt-get on this machine"

echo "system_packages: installing ${missing[*]} (apt-get update, then apt-get install)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300)
if ! { "${apt[@]}" update && "${apt[@]}" install -y --no-install-recommends "${missing[@]}"; } \
    >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    give_up "apt-get failed (its last lines above)"
fi
echo "system_packages: installed ${missing[*]}"
