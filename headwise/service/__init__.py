"""headwise's runtime: model packages served by onnxruntime behind FastAPI (no torch).

api/ (HTTP: routers, schemas, error tables, middleware) → engine/ (models, tokenisation,
batching, post-processing) → backends/ (onnxruntime sessions); `headwise.service.api.app.create_app`
builds the app, `headwise.service.server` is `headwise serve` (docs/architecture.md).
"""
