"""Text to what the voice says: normalization and verbalization of everyday text
(normalize.py, verbalize.py, numbers.py), units a sentence is spoken in (segment.py),
the text policy every frontend's input passes (policy.py: limits, control characters,
markup, streamed text) and phoneme ids (phonemize.py)."""
