#!/usr/bin/env bash
# Run one command in a container on a CI agent: the run wrapper of the XPU and ROCm lanes
# (pipelines/lanes.yaml), the way vLLM's hardware CI scripts run tests on those machines.
#
#   in-container.sh [docker run options...] -- COMMAND [ARG...]
#
# The options before `--` are the lane's device options (--device /dev/dri, ...). The image is
# $KVCONFORM_IMAGE, which the lane's env sets so Buildkite fills it in at pipeline upload. The
# checkout is mounted at the same path and is the working directory, so the JUnit file the
# command writes lands where the step's artifact_paths looks for it. The variables named in
# $KVCONFORM_FORWARD_ENV (the generator lists the step's env and the platform's device
# visibility variables there) are passed into the container. The command's exit status is
# this script's, unchanged.
set -euo pipefail

options=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  options+=("$1")
  shift
done
if [ "$#" -lt 2 ]; then
  echo "usage: in-container.sh [docker run options...] -- COMMAND [ARG...]" >&2
  exit 2
fi
shift  # the --

image="${KVCONFORM_IMAGE:?in-container.sh: set KVCONFORM_IMAGE (in the lane env) to the image to run}"
for name in ${KVCONFORM_FORWARD_ENV:-}; do
  options+=(--env "$name")
done

exec docker run --rm --init --volume "$PWD:$PWD" --workdir "$PWD" \
  ${options[@]+"${options[@]}"} "$image" "$@"
