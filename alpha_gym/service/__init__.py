"""The scoring service: the verifier over HTTP for many rollout workers (`alpha-gym serve`).

    app     the ASGI app (Starlette): POST /score, GET /health, request validation
    server  run it with uvicorn, in the foreground (signals stop it cleanly) or in a thread
    client  a standard-library client for rollout workers and the load test
"""

#: Request limits (here, not in `app`, so that the command line is built without starlette installed).
MAX_BYTES = 1 << 20        # 1 MiB: 12 answers of the longest allowed answer (32,768 chars) fit with room
MAX_ANSWERS = 64           # a group of answers to one prompt (12 in training)
