"""`keras-transformer serve`: translation over HTTP, with dynamic batching.

- `options`: `ServeOptions`, the batching and request limits (the flags).
- `schema`: the request and response bodies (pydantic), and how a body
  that does not parse or validate is told (a 4xx naming the field).
- `jobs`: a valid request's job for an engine: its limits (413), settings,
  sampling and constraints.
- `batcher`: dynamic batching on `--workers` worker threads, with a bounded
  queue.
- `engines`: Keras (`Translator`), CTranslate2 and SavedModel engines.
- `documents`: texts split into sentences and rejoined in their layout.
- `app`: the FastAPI application (endpoints, readiness, the demo page in
  `static/`).
- `guards`: the Host/Origin checks and the bearer token.
- `observability`: `/metrics` and the per-request log.
- `h11_connection`: uvicorn's h11 HTTP/1.1 connection with a header
  timeout, a request limit and JSON answers to malformed HTTP.
- `server`: binding, warm-up, uvicorn, graceful shutdown.

Nothing here imports Keras's backend at import time but `engines` and
`app` (through the run and the model they open); `options` is light.
"""
