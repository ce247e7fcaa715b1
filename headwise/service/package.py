"""Reading model packages (docs/model-package.md): manifest.json plus files checked by sha256."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

REQUIRED = ("name", "version", "architecture", "n_layers", "n_heads", "d_model", "max_len",
            "pooling", "normalize", "tokenizer", "variants")


# Variants each architecture must have (docs/model-package.md).
GRAPHS = {"encoder": ("fast",), "decoder": ("prefill", "decode"),
          "encoder-decoder": ("encoder", "decoder_step")}


# A decoder's or an encoder-decoder's `task`. An encoder package's task names its head
# ("embedding", "classification", ...: service.engine.heads.HEADS, which the engine checks
# when it loads the package, with the labels a head needs).
GENERATION = "generation"


class PackageError(ValueError):
    """A model package that cannot be served; the message names the folder and file."""


@dataclass(frozen=True)
class Variant:
    name: str
    file: Path
    precision: str
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class ModelPackage:
    path: Path
    name: str
    version: str
    family: str
    architecture: str
    n_layers: int
    n_heads: int
    d_model: int
    max_len: int
    pooling: str
    normalize: bool
    tokenizer_file: Path
    pad_id: int
    variants: dict[str, Variant]
    manifest: dict = field(repr=False)
    task: str = "embedding"  # GENERATION, or an encoder's head (service.engine.heads.HEADS)
    labels: tuple[str, ...] = ()  # an encoder's labels where its head has them, in logit order
    # an embedding package's sentence-transformers prompts (name → text) and default prompt
    # (service.engine.prompts), and the Matryoshka sizes it was trained to be cut to, largest first
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    matryoshka_dimensions: tuple[int, ...] = ()

    @property
    def embedding_dim(self) -> int:
        """The sentence embedding's size: d_model, or a Dense layer's output (manifest embedding_dim)."""
        n = self.manifest.get("embedding_dim")
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else self.d_model

    @property
    def dense_layers(self) -> int:
        """Dense layers between the pooling and the normalisation (manifest dense_layers; a
        package written before it had none: unknown modules were not exported then)."""
        n = self.manifest.get("dense_layers", 0)
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0

    @property
    def generative(self) -> bool:
        return self.architecture != "encoder"

    @property
    def created(self) -> int:
        """The export time (manifest `created_at`, ISO 8601) in Unix seconds, as OpenAI's
        `created` (a time without zone read as UTC); 0 when the manifest has none or an
        unreadable one."""
        try:
            when = datetime.fromisoformat(str(self.manifest["created_at"]))
        except (KeyError, ValueError):
            return 0
        return int((when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)).timestamp())


_hash_cache: dict[tuple[str, int, int], str] = {}


def sha256_file(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _hash_cache:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        _hash_cache[key] = h.hexdigest()
    return _hash_cache[key]


def _checked_file(folder: Path, entry: dict, what: str) -> Path:
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        raise PackageError(f"{folder}/manifest.json: {what} has no 'file'")
    path = folder / entry["file"]
    if not path.is_file():
        raise PackageError(f"{path}: file missing ({what})")
    want = entry.get("sha256")
    if not isinstance(want, str):
        raise PackageError(f"{folder}/manifest.json: {what} has no 'sha256'")
    got = sha256_file(path)
    if got != want.lower():
        raise PackageError(f"{path}: sha256 mismatch ({what}): manifest says {want}, file is {got}")
    return path


def load_package(folder: str | Path, verify: bool = True) -> ModelPackage:
    folder = Path(folder)
    mf = folder / "manifest.json"
    try:
        m = json.loads(mf.read_text())
    except FileNotFoundError:
        raise PackageError(f"{mf}: no manifest.json") from None
    except (OSError, ValueError) as e:
        raise PackageError(f"{mf}: unreadable ({e})") from None
    missing = [k for k in REQUIRED if k not in m]
    if missing:
        raise PackageError(f"{mf}: missing fields {', '.join(missing)}")
    arch = m["architecture"]
    task = m.get("task", "embedding" if arch == "encoder" else GENERATION)
    if not isinstance(task, str) or not task:
        raise PackageError(f"{mf}: 'task' must be a non-empty string")
    # an encoder's labels, where they are a non-empty list of distinct strings: a head that
    # answers with labels refuses a package without them (service.engine.heads.check_package)
    labels = m.get("labels") if arch == "encoder" and _labels_ok(m.get("labels")) else ()
    if arch not in GRAPHS:
        raise PackageError(f"{mf}: architecture {arch!r} is not served (encoder, decoder, encoder-decoder)")
    if (task == GENERATION) != (arch != "encoder"):  # an encoder carries a head; a decoder generates
        raise PackageError(f"{mf}: task {task!r} is not served with architecture {arch!r} (an encoder "
                           "serves embedding or classification; a decoder or encoder-decoder, generation)")
    lacking = [g for g in GRAPHS[arch] if g not in m["variants"]]
    if lacking:
        raise PackageError(f"{mf}: no {', '.join(repr(g) for g in lacking)} variant")
    if arch != "encoder" and not isinstance(m.get("special_tokens"), dict):
        raise PackageError(f"{mf}: a generative package needs 'special_tokens'")
    tok = m["tokenizer"]
    if not isinstance(tok, dict) or not isinstance(m["variants"], dict):
        raise PackageError(f"{mf}: 'tokenizer' and 'variants' must be objects")
    tok_file = _checked_file(folder, tok, "tokenizer") if verify else folder / tok["file"]
    variants = {}
    for name, v in m["variants"].items():
        path = _checked_file(folder, v, f"variant {name}") if verify else folder / v["file"]
        variants[name] = Variant(name, path, str(v.get("precision", "fp32")), tuple(v.get("outputs", ())))
    try:
        sizes = {k: _positive_int(m[k], k) for k in ("n_layers", "n_heads", "d_model", "max_len")}
        pad_id = int(tok.get("pad_id", 0))
    except (TypeError, ValueError) as e:
        raise PackageError(f"{mf}: {e}") from None
    _check_tokenizer(tok_file)
    declared = _declared(m, mf, sizes["d_model"])
    return ModelPackage(
        path=folder, name=str(m["name"]), version=str(m["version"]), family=str(m.get("family", "")),
        architecture=m["architecture"], **sizes, pooling=str(m["pooling"] or "none"),
        normalize=bool(m["normalize"]), tokenizer_file=tok_file, pad_id=pad_id,
        variants=variants, manifest=m, task=task,
        labels=tuple(labels), **declared,
    )


def _declared(m: dict, mf: Path, d_model: int) -> dict:
    """prompts, default_prompt_name and matryoshka_dimensions as the manifest declares them
    (absent: none), checked."""
    prompts = m.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()):
        raise PackageError(f"{mf}: 'prompts' must map names to texts")
    default = m.get("default_prompt_name")
    if default is not None and (not isinstance(default, str) or default not in prompts):
        raise PackageError(f"{mf}: default_prompt_name {str(default)[:40]!r} is not one of its prompts")
    dims = m.get("matryoshka_dimensions") or []
    size = m.get("embedding_dim")
    size = size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else d_model
    if not isinstance(dims, list) or not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= size
                                             for n in dims):
        raise PackageError(f"{mf}: 'matryoshka_dimensions' must list sizes in 1..{size}")
    return {"prompts": dict(prompts), "default_prompt_name": default,
            "matryoshka_dimensions": tuple(sorted(set(dims), reverse=True))}


def _labels_ok(labels) -> bool:
    return (isinstance(labels, list) and bool(labels) and all(isinstance(x, str) for x in labels)
            and len(set(labels)) == len(labels))


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {str(value)[:40]!r}")
    return value


def _check_tokenizer(path: Path) -> None:
    """A tokenizer.json that matches its hash but is not one fails here, naming the file."""
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises plain Exception for a bad file
        first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise PackageError(f"{path}: not a tokenizer file ({first})") from None


def find_packages(models_dir: str | Path, verify: bool = True) -> list[ModelPackage]:
    """Every package under models_dir (or models_dir itself when it is one); names must be unique."""
    root = Path(models_dir)
    if not root.is_dir():
        raise PackageError(f"{root}: models folder not found")
    if (root / "manifest.json").is_file():
        folders = [root]
    else:
        folders = sorted(p.parent for p in root.glob("*/manifest.json"))
    if not folders:
        raise PackageError(f"{root}: no model package (no */manifest.json); run `headwise export --out {root}`")
    packages = [load_package(f, verify) for f in folders]
    names = [p.name for p in packages]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise PackageError(f"{root}: several packages named {', '.join(sorted(dup))}")
    return packages


# The parity figures /v1/models shows for a variant: how close to the model it is, and whether
# its answer depends on its batch (max |diff| alone vs batched), as `headwise verify` measured.
QUALITY_FIGURES = ("sentence_embedding", "batch_invariance", "stsb_spearman", "mean_cosine_to_fp32",
                   "min_cosine_to_fp32", "passed")


def variant_facts(manifest: dict, name: str) -> dict:
    """What a variant costs and buys, as measured when the package was made: `scheme`,
    `quality` (figures of QUALITY_FIGURES) and `speed` (inputs/s and the ratio to fp32 per
    workload, with the CPU that measured it). Keys are absent where nothing was measured."""
    out: dict = {}
    spec = (manifest.get("variants") or {}).get(name) or {}
    if isinstance(spec.get("scheme"), str):
        out["scheme"] = spec["scheme"]
    parity = (manifest.get("parity") or {}).get(name)
    if isinstance(parity, dict) and parity:
        out["quality"] = {k: parity[k] for k in QUALITY_FIGURES if k in parity}
    speed = manifest.get("speed") if isinstance(manifest.get("speed"), dict) else {}
    rows = []
    for w in speed.get("workloads") or []:
        rates = w.get("inputs_per_s") if isinstance(w, dict) else None
        if isinstance(rates, dict) and name in rates:
            ratio = (w.get("vs_fp32") or {}).get(name)
            rows.append({"batch": w.get("batch"), "tokens": w.get("tokens"), "inputs_per_s": rates[name],
                         **({"vs_fp32": ratio} if ratio is not None else {})})
    if rows:
        cpu = speed.get("cpu") if isinstance(speed.get("cpu"), dict) else {}
        out["speed"] = {"cpu": cpu.get("model"), "cpu_flags": cpu.get("flags", []), "workloads": rows}
    return out


def check_default_model(name: str | None, served) -> None:
    """HEADWISE_DEFAULT_MODEL must name a served package (PackageError otherwise)."""
    served = sorted(served)
    if name is not None and name not in served:
        raise PackageError(f"HEADWISE_DEFAULT_MODEL is {name!r}, which is not served (served: {', '.join(served)})")


def check_aliases(aliases: dict[str, str], served) -> None:
    """HEADWISE_SERVED_MODEL_NAMES: each alias names a served package and is no package's own
    name (PackageError otherwise)."""
    served = sorted(served)
    for alias, name in aliases.items():
        if name not in served:
            raise PackageError(f"HEADWISE_SERVED_MODEL_NAMES maps {alias!r} to {name!r}, which is not served "
                               f"(served: {', '.join(served)})")
        if alias in served:
            raise PackageError(f"HEADWISE_SERVED_MODEL_NAMES: {alias!r} is already a served package's name")
