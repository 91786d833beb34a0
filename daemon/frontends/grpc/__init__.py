"""The gRPC frontend: NVIDIA Riva's TTS API (`nvidia.riva.tts.RivaSpeechSynthesis`), so
NVIDIA's own clients (`nvidia-riva-client`) and the voice-agent frameworks built on them
reach Magpie by changing one address. See docs/api-grpc.md."""
