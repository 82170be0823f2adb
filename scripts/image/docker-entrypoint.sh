#!/bin/sh
# The official Node images' entry point: an option or anything that is not a command runs with node.
set -e
if [ "${1#-}" != "$1" ] || [ -z "$(command -v "$1")" ] || { [ -f "$1" ] && ! [ -x "$1" ]; }; then
  set -- node "$@"
fi
exec "$@"
