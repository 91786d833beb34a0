"""The frontend-neutral core: each utterance's lifecycle from admission to its one
outcome (core.py), the speaker worker (speaker.py), the request and its events
(utterance.py), the priority queue, the rate limit and the latency figures."""
