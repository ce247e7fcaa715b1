"""Wire formats of the compatible protocols, no HTTP here: TEI's bodies (tei), transformers'
token-classification pipeline answer (token_pipeline), Jina's rerank (rerank), Cohere's
(cohere), vLLM's (vllm), KServe v2 tensors (v2tensors), and the OpenAPI helpers (openapi,
schemas)."""
