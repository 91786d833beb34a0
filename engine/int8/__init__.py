"""INT8 preparation (offline): a static-QDQ INT8 decoder and, where it passes, an INT8 flow
in the frontend, calibrated on real phoneme data and gated against fp32.

One module a stage, imported bottom to top:
- `measures.py`: log-mel distance, pause floor (hiss), the decoders they are taken on;
- `mos.py`: DNSMOS (P.808, P.835) on onnxruntime, the gate's ear;
- `calibration.py`: calibration and gate sentences, seeded latents, calibration windows;
- `candidates.py`: the decoder candidates (conv groups, what each keeps fp32) and the
  quantizer, from the channels-last graph;
- `race.py`: decoders timed in turn, and the layout (channels-last / NHWC / NCHW);
- `gate.py`: the bounds, the pick among candidates, WER over paired draws, the verdict;
- `scoring.py`: a candidate (or the whole INT8 path) scored against fp32 on the gate
  sentences, with and without the expander;
- `flow.py`: the INT8 flow in the frontend, adopted only within the same bounds;
- `prepare.py`: `prepare_int8`, which runs the stages and writes the gate report.
"""

from .calibration import CALIBRATION_TEXTS, GATE_TEXTS, latents
from .gate import GATE_FORMAT, gate_verdict
from .measures import log_mel, log_mel_distance, pause_floor_dbfs
from .prepare import prepare_int8

__all__ = [
    "CALIBRATION_TEXTS",
    "GATE_FORMAT",
    "GATE_TEXTS",
    "gate_verdict",
    "latents",
    "log_mel",
    "log_mel_distance",
    "pause_floor_dbfs",
    "prepare_int8",
]
