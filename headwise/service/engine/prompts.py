"""Prompts (docs/api.md, "Prompts"): a sentence-embedding model's named texts, read from its
sentence-transformers configuration at export (manifest `prompts`, `default_prompt_name`),
prepended to each input exactly as sentence-transformers does (`prompt + text`), so that an
answer equals `SentenceTransformer.encode(texts, prompt_name=name)`.

Which prompt an input gets: the request's `prompt_name`; else HEADWISE_DEFAULT_PROMPT_NAME;
else the model's own default_prompt_name; else none. A name the model does not have is
refused (Validation, naming the model's prompts), never ignored. Token-id inputs are used as
they are: a prompt named with them is refused, a default one is not applied.

Cohere's `input_type` names a use, not a prompt (COHERE_PROMPTS): the model's prompt for that
use when it has one; no prompt when the model declares no prompt text at all (a symmetric
model: sentence-transformers' encode_query / encode_document answer so too); refused when the
model has prompts but none for that use, where any choice would be a guess.
"""

from __future__ import annotations

from typing import NamedTuple

from headwise.service.errors import Validation
from headwise.service.package import PackageError

# Cohere's input_type → the prompt names that serve it, in order of preference: those
# sentence-transformers' encode_query / encode_document look for (query; document, passage,
# corpus), and the names nomic-embed and others give their classification and clustering prompts.
COHERE_PROMPTS = {"search_query": ("query",), "search_document": ("document", "passage", "corpus"),
                  "classification": ("classification",), "clustering": ("clustering",)}


class Prompt(NamedTuple):
    name: str
    text: str


def describe(prompts: dict[str, str]) -> str:
    return ", ".join(sorted(prompts)) if prompts else "none"


def named(package, name: str, field: str = "prompt_name") -> Prompt:
    """The package's prompt `name`; Validation naming its prompts when it has no such one."""
    prompts = package.prompts
    if name not in prompts:
        raise Validation(f"{{field}}: model {package.name!r} has no prompt {name[:64]!r} (its prompts: "
                         f"{describe(prompts)}; sentence-transformers' config_sentence_transformers.json)",
                         field=field)
    return Prompt(name, prompts[name])


def default(package, setting: str | None) -> Prompt | None:
    """The prompt an input gets when the request names none: HEADWISE_DEFAULT_PROMPT_NAME (its
    value `setting`, checked at start-up: check_default_prompt_name), else the package's
    default_prompt_name, else None."""
    name = setting if setting is not None else package.default_prompt_name
    if name is None or name not in package.prompts:
        return None
    return Prompt(name, package.prompts[name])


def resolve(package, setting: str | None, name: str | None) -> Prompt | None:
    """The prompt of a request that names `name` (None: the default)."""
    return named(package, name) if name is not None else default(package, setting)


def for_input_type(package, input_type: str | None, setting: str | None) -> Prompt | None:
    """The prompt Cohere's `input_type` asks for (module docstring); None leaves the default."""
    if input_type is None or input_type not in COHERE_PROMPTS:
        return default(package, setting)
    names = COHERE_PROMPTS[input_type]
    prompts = package.prompts
    for n in names:
        if n in prompts:
            return Prompt(n, prompts[n])
    if not any(prompts.values()):  # a model with no prompt text: every input_type embeds alike
        return None
    raise Validation(f"{{field}}: {input_type} needs the model's {' or '.join(repr(n) for n in names)} prompt, "
                     f"and model {package.name!r} has none of them (its prompts: {describe(prompts)}); "
                     "use /v1/embed or TEI's /embed with prompt_name to pick one", field="input_type")


def apply(texts: list, prompt: Prompt | None, explicit: bool = False) -> list:
    """`prompt.text + text` for each text. Token-id inputs are left as they are; with a
    prompt the request named (`explicit`), they are refused."""
    if prompt is None or not prompt.text:
        return texts
    if texts and not isinstance(texts[0], str):
        if explicit:
            raise Validation("{field}: a prompt is prepended to texts; token-id inputs are used as they are "
                             "(prepend the prompt's ids yourself, or send texts)", field="prompt_name")
        return texts
    return [prompt.text + t for t in texts]


def span(prompt: Prompt | None, ids, offsets, special_ids) -> list[int] | None:
    """[start, end): the positions of the tokens that begin inside the prompt's characters
    (special tokens never); None without a prompt or when it has no token."""
    if prompt is None or not prompt.text:
        return None
    n = len(prompt.text)
    inside = [i for i, (tid, (a, b)) in enumerate(zip(ids, offsets, strict=True))
              if a < n and not (int(tid) in special_ids and a == b == 0)]
    return [inside[0], inside[-1] + 1] if inside else None


def payload(prompt: Prompt | None) -> dict | None:
    """The answer's `prompt`: {name, text}, or None when no prompt text was prepended."""
    return {"name": prompt.name, "text": prompt.text} if prompt is not None and prompt.text else None


def check_default_prompt_name(setting: str | None, packages) -> None:
    """HEADWISE_DEFAULT_PROMPT_NAME must name a prompt of every embedding package served
    (PackageError naming the setting otherwise)."""
    if setting is None:
        return
    for p in packages:
        if p.task == "embedding" and setting not in p.prompts:
            raise PackageError(f"HEADWISE_DEFAULT_PROMPT_NAME is {setting!r}, which model {p.name!r} does not have "
                             f"(its prompts: {describe(p.prompts)})")
