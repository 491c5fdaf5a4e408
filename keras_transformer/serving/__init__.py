"""`keras-transformer serve`: translation over HTTP, with dynamic batching.

- `options`: `ServeOptions`, the batching and request limits (the flags).
- `protocol`: the request and response bodies, and every bad request's
  answer (a 4xx naming the field).
- `batcher`: dynamic batching on `--workers` worker threads, with a bounded
  queue.
- `engines`: Keras (`Translator`), CTranslate2 and SavedModel engines.
- `app`: the FastAPI application (endpoints, the demo page in `static/`).
- `server`: binding, uvicorn, graceful shutdown.

Nothing here imports Keras's backend at import time but `engines` and
`app` (through the run and the model they open); `options` is light.
"""
