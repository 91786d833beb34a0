"""HTTP (aiohttp): the OpenAI speech API, /tts, /v1/say, /health, /metrics (server.py),
one audio response streamed or whole (audio.py), request field checks (fields.py)."""
