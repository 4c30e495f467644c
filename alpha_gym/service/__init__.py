"""The scoring service: the verifier over HTTP for many rollout workers (`alpha-gym serve`).

    app     the ASGI app (Starlette): POST /score, GET /health, request validation
    server  run it with uvicorn, in the foreground (signals stop it cleanly) or in a thread
    client  a standard-library client for rollout workers and the load test
"""
