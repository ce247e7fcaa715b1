"""Fill-mask packages (masked language models: `*ForMaskedLM`): an encoder with BERT's
masked-LM head (Devlin et al. 2019, "BERT", §3.1) → fast.onnx (token_logits [B, T, vocab_size],
every position's scores over the vocabulary), fast.fp16.onnx (CUDA) and analysis.onnx, verified
against the torch model on single texts holding the tokenizer's mask token, at their real tokens.

The manifest names the mask token (`mask_token`: "[MASK]", "<mask>") and no labels: the
vocabulary is the tokenizer's. No int8, as for the other heads (docs/model-package.md).
"""

from __future__ import annotations

from pathlib import Path

from headwise.export import manifest as mf
from headwise.export.encoder import EncoderKind
from headwise.export.pipeline import Options
from headwise.export.verify import verify
from headwise.model.importers import CheckpointError
from headwise.model.sentence import LoadedModel
from headwise.model.tokenizer import Tokenizer

# The mask tokens of BERT (ModernBERT, DistilBERT, ...) and of RoBERTa (XLM-RoBERTa, MPNet).
MASK_TOKENS = ("[MASK]", "<mask>")
MASK = "{mask}"  # in PARITY_MASKED: the package's mask token (parity_texts)
# Texts with the mask token: one, several, first, alone; non-Latin, emoji, none, and longer than
# max_len (the mask cut off), as the other kinds' inputs are.
PARITY_MASKED = [
    "Paris is the {mask} of France.",
    "{mask}",
    "The quick brown {mask} jumps over the lazy {mask}.",
    "{mask} is approximately pi; 2 + 2 = 4.",
    "東京は日本の{mask}です。",
    "Emoji test 🎉🚀 with {mask}: <>&%$#@!",
    "Ünïcödé — naïve {mask} résumé, déjà vu!",
    "",
    "no mask here",
    " ".join(["long"] * 400) + " {mask}",
]


def parity_texts(mask_token: str) -> list[str]:
    """PARITY_MASKED with the package's mask token in place."""
    return [t.replace(MASK, mask_token) for t in PARITY_MASKED]


def mask_token(tokenizer: Tokenizer, where: str) -> str:
    """The first of MASK_TOKENS that the tokenizer reads as one token in a text (a special
    token of tokenizer.json), as the server looks for it; CheckpointError naming `where` if none."""
    for token in MASK_TOKENS:
        if token in tokenizer([token]).tokens[0]:
            return token
    raise CheckpointError(f"{where}: its tokenizer has no mask token ({' or '.join(MASK_TOKENS)} read as one "
                          "token); a fill-mask package needs one")


class FillMaskKind(EncoderKind):
    task = "fill-mask"
    head = "ForMaskedLM"
    outputs = ("token_logits",)
    int8 = False
    parity_inputs = PARITY_MASKED  # templates: verify puts the package's mask token in (parity_texts)

    def notes(self, options: Options) -> list[str]:
        return ["fill-mask packages have fp32 and fp16 variants, no int8"] if options.int8 else []

    def load(self, checkpoint: Path) -> LoadedModel:
        loaded = super().load(checkpoint)
        mask_token(loaded.tokenizer, str(checkpoint))  # refused before any graph is written
        return loaded

    def facts(self, loaded: LoadedModel) -> dict:
        return {**super().facts(loaded), "pooling": None, "normalize": False,
                "mask_token": mask_token(loaded.tokenizer, loaded.source["path"])}

    def verify(self, pkg: Path, checkpoint: Path | None, options: Options, progress) -> dict:
        mask = mf.read(pkg).get("mask_token")
        if not isinstance(mask, str):
            raise mf.PackageError(f"{pkg / mf.MANIFEST}: a fill-mask package needs 'mask_token'")
        return verify(pkg, checkpoint, options.stsb_path, progress, options.quality, parity_texts(mask))
