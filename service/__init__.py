"""headwise's runtime: model packages served by onnxruntime behind FastAPI (no torch).

routers/ (HTTP) → engine (models, queues, batching) → backend (onnxruntime sessions);
`service.app.create_app` builds the app, `service.cli` is `headwise serve`.
"""
