#!/usr/bin/env bash
# `make run`: speak one sentence on the default voice. Uses the sound card when ALSA's
# default device opens, else writes a WAV through ALSA's file plugin and prints its path.
set -euo pipefail
cd "$(dirname "$0")/.."
text=${1:-"Hello! Magpie is ready."}
bin=.venv/bin
mkdir -p build
if aplay -q -D default -t raw -f S16_LE -r 22050 -c 1 /dev/null 2>/dev/null; then
    device=default
    wav=""
else
    wav="$PWD/build/magpie-demo.wav"
    rm -f "$wav"
    device="file:FILE=$wav,FORMAT=wav"
    echo "no sound card: speaking into $wav"
fi
MAGPIE_TTS_AUDIO__DEVICE="$device" "$bin/magpie-tts" say "$text"
if [ -n "$wav" ]; then
    echo "spoken into $wav"
fi
