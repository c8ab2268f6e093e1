#!/usr/bin/env bash
# Installs pacs-pp and everything its CLI, tests, training, video and demo need, on a fresh machine, in minutes.
# torch is pinned to the CPU build (constraints.txt) unless a torch is already installed (GPU users keep theirs).
# Usage: bash scripts/setup.sh            (library, CLI, training, generation, video, demo, benchmarks, SigLIP, Pearl,
#                                          captioning)
#        bash scripts/setup.sh --tests    (also the test tools and, as root, Debian's headless Chromium)
# As root, Debian's default-jre-headless too (Java: the COCO caption metrics), when no java is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CONSTRAINTS=constraints.txt
if "$PY" -c "import torch" 2>/dev/null; then
  CONSTRAINTS=$(mktemp)
  "$PY" -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > "$CONSTRAINTS"
fi
"$PY" -m pip install -q --disable-pip-version-check -c "$CONSTRAINTS" \
  -e ".[train,video,demo,dev,benchmarks,generate,siglip,pearl,captioning,torchmetrics]"
# The original OpenAI CLIP and open_clip code (tests compare against both, loading their files by path);
# --no-deps: they ask for torchvision (and timm), which have no CPU build matching this torch and are not needed.
"$PY" -m pip install -q --disable-pip-version-check --no-deps openai-clip==1.0.1 open_clip_torch==3.3.0
# Java runs pycocoevalcap's PTB tokenizer, METEOR and SPICE (pacs-pp evaluate-captions, the system report).
if ! command -v java >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends default-jre-headless >/dev/null
  else
    echo "setup.sh: install a Java runtime (Debian: default-jre-headless) for BLEU/METEOR/ROUGE-L/CIDEr/SPICE" >&2
  fi
fi
if [ "${1:-}" = "--tests" ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "setup.sh: install Debian's chromium (/usr/bin/chromium) for the browser test" >&2
  fi
fi
