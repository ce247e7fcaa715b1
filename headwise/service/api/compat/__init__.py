"""Wire formats of the compatible protocols (KServe v2 tensors, OpenAPI helpers); no HTTP here."""
