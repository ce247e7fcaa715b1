"""The HTTP layer: routers (one per area), request and response schemas, the protocols' error
tables, middleware and the app. It calls the engine and maps its domain errors to responses."""
