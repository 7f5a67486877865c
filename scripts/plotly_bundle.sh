#!/usr/bin/env bash
# Builds reports/vendor/plotly-bar-scatter.min.js: plotly.js's core (the scatter trace and the
# components) with the bar trace, what the report draws, and nothing else; plotly's own
# partial-bundle way (lib/core + the traces' lib modules, built with esbuild as plotly's
# esbuild-config.js builds its dist). The basic dist (plotly.js-basic-dist-min) also carries pie,
# the world calendars and maplibre's CSS: 50 kB more.
#
#     bash scripts/plotly_bundle.sh [PLOTLY_VERSION]    (needs node and npm)
set -euo pipefail
version="${1:-4.1.1}"
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
npm init -y >/dev/null
npm install --no-audit --no-fund --ignore-scripts "plotly.js@$version" esbuild@0.25 >/dev/null
cat > entry.js <<'JS'
var Plotly = require('plotly.js/lib/core');
Plotly.register([require('plotly.js/lib/bar')]);
module.exports = Plotly;
JS
# maplibre's CSS, which plotly's registry asks for only for map subplots, goes to a file of its own
# and is dropped: the report draws no map
node_modules/.bin/esbuild entry.js --bundle --minify --format=iife --global-name=Plotly --target=es2016 \
  --define:global=window --define:define.amd=false --define:process.env.NODE_DEBUG=false \
  --alias:stream=stream-browserify --log-level=error --outfile=out.min.js
{
  printf '/**\n* plotly.js (bar and scatter: lib/core and lib/bar, scripts/plotly_bundle.sh) v%s\n' "$version"
  printf '* Copyright 2012-2026, Plotly, Inc.\n* All rights reserved.\n* Licensed under the MIT license\n*/\n'
  cat out.min.js
} > "$here/reports/vendor/plotly-bar-scatter.min.js"
cp node_modules/plotly.js/LICENSE "$here/reports/vendor/plotly.js-LICENSE"
echo "reports/vendor/plotly-bar-scatter.min.js: $(wc -c < "$here/reports/vendor/plotly-bar-scatter.min.js") bytes"
