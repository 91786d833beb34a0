"""The streaming runtime: units → phoneme ids → latent → audio chunks as they are
decoded. synth.py is the synthesizer a caller holds; sessions.py loads what it runs on
(graphs, provider, precision, sessions per lane); units.py makes one stream's units'
audio; config.py is its configuration. Beside them: the chunked decoder and its windows
(decoder.py), the flow run as windows read it (latent.py), turns between concurrent
streams (turns.py), the lanes' measured speed (speed.py), the seams of units cut
mid-sentence (seam.py), the phrase cache (cache.py) and the INT8 expander (expander.py)."""
