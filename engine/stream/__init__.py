"""The streaming runtime: units → phoneme ids → latent → audio chunks as they are
decoded (synth.py), the chunked decoder and its windows (decoder.py), the flow run as
windows read it (latent.py), turns between concurrent streams (turns.py), the seams of
units cut mid-sentence (seam.py), the phrase cache (cache.py) and the INT8 expander."""
