"""Exception types callers can tell apart: bad text, bad voice, engine failure."""


class EngineError(Exception):
    """Base class for every error the engine raises on purpose."""


class TextError(EngineError, ValueError):
    """The text cannot be spoken: empty, too long, or nothing pronounceable."""


class VoiceError(EngineError):
    """The voice cannot be used: missing, unreadable or not a Piper/VITS model."""
