"""How `headwise serve` runs the app: the command (`serve`), and the two modules that rely on
private internals of FastAPI, Starlette and uvicorn (`fastpath`, `http_protocol`). They are
used only at the versions `versions.WRITTEN_FOR` names; with others installed, `serve` runs
the plain app on uvicorn's own protocol and says so (docs/architecture.md)."""
