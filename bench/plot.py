"""The PNG: throughput against client concurrency per variant, one panel per input length,
with the in-process ceiling drawn (dashed, x = batch size) and the peers for reference."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.cells import Row
from bench.report import tokens_label

COLORS = {"fp32": "tab:blue", "int8": "tab:green", "fp16": "tab:purple", "attention": "tab:orange"}


def plot(rows: Sequence[Row], path: Path, title: str) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.samples]
    lengths = sorted({r.tokens for r in rows if r.suite in ("headwise", "naive-server")}
                     or {r.tokens for r in rows})
    if not lengths:
        return None
    fig, axes = plt.subplots(1, len(lengths), figsize=(max(7.0, 4.6 * len(lengths)), 5.2), squeeze=False)
    for ax, tokens in zip(axes[0], lengths, strict=True):
        here = [r for r in rows if r.tokens == tokens]
        label = tokens_label(here[0])
        xs_all: set[int] = set()
        for variant, color in COLORS.items():
            hw = sorted((r for r in here if r.suite == "headwise" and r.variant == variant),
                        key=lambda r: r.concurrency)
            if hw:
                xs = [r.concurrency for r in hw]
                xs_all.update(xs)
                ax.plot(xs, [r.med("throughput") for r in hw], "o-", color=color,
                        label=f"headwise {variant}")
            ce = sorted((r for r in here if r.suite == "ceiling" and r.variant == variant),
                        key=lambda r: r.batch)
            if ce:
                xs = [r.batch for r in ce]
                xs_all.update(xs)
                ax.plot(xs, [r.med("throughput") for r in ce], "x--", color=color, alpha=0.7,
                        label=f"ceiling {variant} (x = batch)")
        nv = sorted((r for r in here if r.suite == "naive-server"), key=lambda r: r.concurrency)
        if nv:
            xs_all.update(r.concurrency for r in nv)
            ax.plot([r.concurrency for r in nv], [r.med("throughput") for r in nv], "s-",
                    color="tab:gray", label="naive FastAPI+PyTorch")
        st = sorted((r for r in here if r.suite == "sentence-transformers"), key=lambda r: r.batch)
        if st:
            xs_all.update(r.batch for r in st)
            ax.plot([r.batch for r in st], [r.med("throughput") for r in st], "^:",
                    color="tab:red", label="sentence-transformers (x = batch)")
        ax.set_xscale("log", base=2)
        if xs_all:
            ax.set_xticks(sorted(xs_all))
            ax.set_xticklabels([str(x) for x in sorted(xs_all)])
        ax.set_xlabel("concurrent clients (HTTP) / batch size (in-process)")
        ax.set_ylabel("inputs / s")
        ax.set_title(f"{label} tokens per input")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    handles: dict = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(4, len(handles)),
               fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06 + 0.035 * ((len(handles) - 1) // 4), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
