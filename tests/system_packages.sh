#!/usr/bin/env bash
# The Debian packages some tests use, installed where this can (root with apt-get): chromium,
# the headless browser of the dashboard's page tests. Where it cannot, those tests skip and say
# why; this script never fails the test command.
set -u
need=()
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: ${need[*]} not installed (needs root and apt-get); the tests using it skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } >/dev/null; then
  echo "note: could not install ${need[*]}; the tests using it skip" >&2
fi
exit 0
