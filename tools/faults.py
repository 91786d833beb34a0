"""Voices that really fail, for the fallback's tests and the soak: nothing in the daemon
knows of them. `corrupt_voice` is a model file cut short (it does not load);
`faulty_voice` is the real voice with two Gather nodes before its encoder that make
onnxruntime raise while it runs on any text with the phoneme /ʒ/ ("treasure", "measure")
and give the voice's own audio for any other text (its warm-up and self-test pass)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

FAULT_PHONEME = "ʒ"
FAULT_WORDS = ("treasure", "measure", "usual", "vision")  # each says /ʒ/


def _copy_config(model: Path, to: Path) -> None:
    shutil.copy(model.with_name(model.name + ".json"), to.with_name(to.name + ".json"))


def corrupt_voice(folder: Path, name: str = "en_US-corrupt-medium") -> Path:
    """The default voice's model cut to its first 4 KiB, its config beside it."""
    from magpie_tts.engine import load_voice

    voice = load_voice()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.onnx"
    with voice.model_path.open("rb") as source:
        target.write_bytes(source.read(4096))
    _copy_config(voice.model_path, target)
    return target


def faulty_voice(folder: Path, name: str = "en_US-faulty-medium") -> Path:
    """The default voice, but onnxruntime raises (InvalidArgument: Gather indices out of
    bounds) on the first run of any unit whose phonemes hold /ʒ/. The first Gather maps
    each phoneme id to itself and /ʒ/'s to 2**20; the second indexes a table of the ids
    with that, which onnxruntime refuses."""
    import onnx
    from magpie_tts.engine import load_voice
    from onnx import helper, numpy_helper

    voice = load_voice()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.onnx"
    if target.is_file():
        return target
    model = onnx.load(str(voice.model_path))
    count = max(max(ids) for ids in voice.phoneme_id_map.values()) + 1
    remap = np.arange(count, dtype=np.int64)
    remap[voice.phoneme_id_map[FAULT_PHONEME][0]] = 1 << 20
    graph = model.graph
    for node in graph.node:
        node.input[:] = ["fault_checked" if name == "input" else name for name in node.input]
    graph.initializer.extend(
        [
            numpy_helper.from_array(remap, "fault_remap"),
            numpy_helper.from_array(np.arange(count, dtype=np.int64), "fault_ids"),
        ]
    )
    graph.node.insert(0, helper.make_node("Gather", ["fault_remap", "input"], ["fault_mapped"]))
    graph.node.insert(
        1, helper.make_node("Gather", ["fault_ids", "fault_mapped"], ["fault_checked"])
    )
    partial = target.with_suffix(".partial")
    onnx.save(model, str(partial))
    _copy_config(voice.model_path, target)
    partial.rename(target)
    return target
