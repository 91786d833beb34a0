"""The frontend-neutral core: each utterance's lifecycle from admission to its one
outcome (core.py), the speaker worker (speaker.py), a client-bound utterance's thread
(client.py) and its synthesis slots (slots.py), the request and its events
(utterance.py), the priority queue, the rate limits and the latency figures."""
