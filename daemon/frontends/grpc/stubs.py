"""The Riva service definitions: the generated modules NVIDIA ships in `nvidia-riva-client`
(`riva.client.proto`), not copies of its protos. Imported when the frontend is built, so a
daemon without the `grpc` extra runs as before unless `grpc.enabled` asks for it."""

from __future__ import annotations

import functools
from types import SimpleNamespace

from magpie_tts.daemon.config import ConfigError

INSTALL = "pip install 'magpie-tts[grpc]' (the nvidia-riva-client package)"


@functools.cache
def stubs() -> SimpleNamespace:
    """`tts` (messages), `tts_grpc` (servicer), `AudioEncoding`, `RequestId`; ConfigError
    when the package is missing."""
    try:
        from riva.client.proto import (
            riva_audio_pb2,
            riva_common_pb2,
            riva_tts_pb2,
            riva_tts_pb2_grpc,
        )
    except ImportError as exc:
        problem = f"grpc.enabled needs NVIDIA's service definitions: {INSTALL} ({exc})"
        raise ConfigError(problem) from None
    return SimpleNamespace(
        tts=riva_tts_pb2,
        tts_grpc=riva_tts_pb2_grpc,
        AudioEncoding=riva_audio_pb2.AudioEncoding,
        RequestId=riva_common_pb2.RequestId,
    )
