"""Matryoshka dimensions (docs/api.md, "dimensions"): an embedding is cut to its first n
values only where the model was trained for it (MatryoshkaLoss); elsewhere the first n values
of an embedding are a worse embedding, served without a word. sentence-transformers saves no
field that says so, so the package declares them (`headwise export --matryoshka-dimensions`,
manifest `matryoshka_dimensions`) or HEADWISE_MATRYOSHKA_DIMENSIONS does, for every embedding
model served; the setting, where set, is the one read."""

from __future__ import annotations

from headwise.service.errors import InvalidRequest
from headwise.service.package import PackageError

SETTING = "HEADWISE_MATRYOSHKA_DIMENSIONS"


def declared(package, settings) -> tuple[int, ...]:
    """The sizes `package` may be cut to, largest first: the setting's, else the package's."""
    return settings.matryoshka_dimensions or package.matryoshka_dimensions


def check(package, settings, n: int | None, field: str = "dimensions") -> int | None:
    """The size to cut to, or None for the whole embedding: `n` (already checked to be in
    1..embedding_dim by the route) when it is the whole size or a declared one; InvalidRequest
    naming the setting otherwise."""
    size = package.embedding_dim
    if n is None or n >= size:
        return None
    sizes = declared(package, settings)
    if not sizes:
        raise InvalidRequest(
            f"{{field}}: model {package.name!r} declares no Matryoshka dimensions, and the first {n} of its "
            f"{size} values are not an embedding it was trained to give. If it was trained with MatryoshkaLoss, "
            f"set {SETTING} (e.g. {size // 2},{size // 4}) or export it with --matryoshka-dimensions; otherwise "
            f"leave {{field}} out", field=field)
    if n not in sizes:
        raise InvalidRequest(f"{{field}}: model {package.name!r} is cut only to its Matryoshka dimensions "
                             f"({', '.join(map(str, sizes))}; {SETTING}) or served whole ({size})", field=field)
    return n


def check_setting(settings, packages) -> None:
    """Every size HEADWISE_MATRYOSHKA_DIMENSIONS names fits every embedding model served."""
    for p in packages:
        too_big = [n for n in settings.matryoshka_dimensions if n > p.embedding_dim]
        if p.task == "embedding" and too_big:
            raise PackageError(f"{SETTING} names {', '.join(map(str, too_big))}, over model {p.name!r}'s embedding "
                               f"size ({p.embedding_dim})")
