"""Offline ONNX graph work, done once per voice and cached beside it: the split of a
Piper voice into frontend and decoder (split.py), of the frontend into encoder and flow
(flow_split.py), and the rewrites that make them faster with the same arithmetic
(polyphase upsamplers, channels-last decoder, fused layer norms, no-op arithmetic)."""
