"""The sets of texts a tokenizer's reading is checked on (`headwise export`'s verification of the
ASCII path, headwise.ascii_path; bench.tokenizers_eval; the service's tokenizer tests): the
shipped STS-B dev sentences, a multilingual set, and hostile unicode."""

from __future__ import annotations

import unicodedata
from pathlib import Path

from headwise.export.stsb import BUNDLED, load_pairs

DATA = Path(__file__).resolve().parent / "data"
MULTILINGUAL = DATA / "multilingual.txt"


def stsb() -> list[str]:
    """Every sentence of the shipped STS-B dev split (3,000: both sides of 1,500 pairs)."""
    a, b, _ = load_pairs(BUNDLED)
    return list(a) + list(b)


def multilingual() -> list[str]:
    """data/multilingual.txt (about 30 scripts) and variants of each line: upper case,
    NFD, NFKC, an emoji appended, and two lines of different scripts joined."""
    base = [ln for ln in MULTILINGUAL.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")]
    out = list(base)
    out += [s.upper() for s in base]
    out += [unicodedata.normalize("NFD", s) for s in base]
    out += [unicodedata.normalize("NFKC", s) for s in base]
    out += [s + " 🙂👍🏾" for s in base]
    out += [base[i] + " " + base[(i * 37 + 11) % len(base)] for i in range(len(base))]
    return out


def hostile() -> list[str]:
    """Unicode that tokenizers disagree on: combining marks, joiners, bidi controls, lone
    surrogates (real ones, and their escapes as text), control characters, very long words,
    normalisation forms, case mappings that change length, the special tokens' own text."""
    s: list[str] = []
    # combining marks: stacks ("zalgo"), on letters, digits, spaces, alone, at the start
    s += ["Z̴̡̧̛̖̗a̸̢̛̗̘l̷̨̛̖g̵̢̛̗o̷̡̧̖ ̶t̷̨̗e̸͖x̶̢t̵̡", "a" + "\u0301" * 50, "\u0301\u0302\u0303 start", "1\u20e3 2\u20e3 #\u20e3",
          " \u0308 ", "e\u0301 vs \u00e9", "\u0915\u093c vs \u0958", "\u1100\u1161\u11a8 vs \uac01"]
    # joiners, zero-width, variation selectors, emoji sequences
    s += ["a\u200db", "a\u200cb", "a\u200bb\u200bc", "\ufeffbom at start", "mid\ufeffbom", "\u2060word\u2060joiner",
          "👨\u200d👩\u200d👧\u200d👦", "👩🏽\u200d🚀", "🏳\ufe0f\u200d🌈", "\u2764\ufe0f \u2764\ufe0e", "🇺🇳🇪🇺🇦🇶",
          "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f", "\u0c95\u0ccd\u200d\u0cb7", "soft\u00adhyphen",
          "\u180emongolian\u180e", "\u034fgrapheme\u034fjoiner"]
    # bidi controls
    s += ["\u202eevil\u202c text", "abc\u202dxyz\u202c", "\u2066isolate\u2069 \u2067rtl\u2069 \u2068fsi\u2069",
          "\u200fRLM\u200e LRM", "user\u202egnp.exe", "مرحبا \u202aEnglish\u202c عالم", "\u061cArabic letter mark"]
    # lone surrogates, real and as escaped text
    s += ["lone \ud800 high", "lone \udfff low", "\udc80\udc81", "pair reversed \udc00\ud800",
          "escaped \\ud800 text", "json \\udfff and \\u0000", "\\U0001F600 \\x00 \\N{SNOWMAN}"]
    # control characters: C0, DEL, C1, separators, odd spaces
    s += ["".join(chr(c) for c in range(32)) + "controls", "tab\tnew\nline\rreturn", "nul\x00inside", "del\x7fchar",
          "".join(chr(c) for c in range(0x80, 0xa0)) + "c1", "line\u2028sep\u2029para", "nbsp\u00a0narrow\u202fideo\u3000space",
          "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a", "\x1b[31mred\x1b[0m", "form\x0cfeed\x0bvt",
          "\u0085next line", "", " ", "\t\n", "\u3000", "\x00", "\ufffd replacement \ufffd", "\ufffe\uffff nonchars",
          "\ue000\uf8ff private", "\U000f0000 plane 15", "\U0010ffff last", "\u0378\u0379 unassigned", "\U0001fbf0 digit"]
    # very long words and runs
    s += ["a" * 99, "a" * 100, "a" * 101, "a" * 5000, "supercalifragilisticexpialidocious" * 20,
          "Rindfleischetikettierungsüberwachungsaufgabenübertragungsgesetz" * 3, "x" * 3 + "ü" * 120,
          "https://example.com/" + "path/" * 60 + "?q=" + "%20" * 40, "0123456789" * 40, "QUJD" * 200 + "==",
          "!" * 300, "😀" * 300, "猫" * 400, "the " * 400, ". " * 300, "ﷺ" * 20, "﷽" * 20, "ⅷ" * 30]
    # normalisation forms of the same text
    for text in ("Crème brûlée à la française", "Ångström Å Å", "ﬁne ﬂour ﬃ", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
                 "① ② ⑩ ⅻ ½ ¼ x² H₂O", "𝐇𝐞𝐥𝐥𝐨 𝕎𝕠𝕣𝕝𝕕 𝓼𝓬𝓻𝓲𝓹𝓽", "Tiếng Việt có dấu", "한국어 자모", "ｶﾞｷﾞｸﾞ ガギグ",
                 "Ǆemal ǅ ǆ", "µ vs μ, K vs K, Ω vs Ω", "ﾊﾟﾋﾟ ㌀ ㍻ ㎏"):
        s += [unicodedata.normalize(form, text) for form in ("NFC", "NFD", "NFKC", "NFKD")]
    # case mappings that change length or depend on language
    s += ["İstanbul ISTANBUL ıi", "STRASSE Straße ẞ", "ΣΊΣΥΦΟΣ σίσυφος ς", "ǰ̌ J̌", "ﬀ ﬅ ﬆ", "ŉ ΐ ΰ և",
          "Ⅻ ⅻ", "ᾼ ᾳ ῌ", "\u0130\u0307", "K\u212a\u00c5\u212b"]
    # the special tokens' own text, and near misses
    s += ["[CLS] hello [SEP]", "[SEP]", "[PAD][PAD]", "[MASK] is masked", "[UNK]", "[cls] lower", "[ SEP ]",
          "text[SEP]glued", "<s> </s> <pad> <unk>", "[CLS][SEP][PAD][UNK][MASK]", "##ing ##s", "[unused0] [unused99]"]
    # mixed scripts inside one word, and CJK extension planes
    s += ["pаypаl (Cyrillic а)", "ЁлкаTree木", "𠀀𠀁𪜀𫝀𫠠𬺰 ext", "\u4e00\u9fff\u3400\uf900\u2f800", "〇〻々〆",
          "ㄅㄆㄇ bopomofo", "ᄀ ᅡ ᆨ jamo", "ﾟ｡ halfwidth", "Ａ-Ｚ ａ-ｚ"]
    return s


def ascii_hostile() -> list[str]:
    """ASCII the path must get right or leave: every ASCII character alone and inside words,
    the added tokens' text in every case and glued, long words, runs of punctuation."""
    s = [chr(c) for c in range(128)]
    s += [f"a{chr(c)}b {chr(c)}x y{chr(c)}" for c in range(128)]
    s += ["[CLS] hello [SEP]", "[cls] hello [sep]", "[Cls]", "x[MASK]y", "[mask]", "[PAD][pad]", "[UNK]", "[unk]",
          "<s> </s> <pad> <unk> <mask>", "[ SEP ]", "##ing ##s", "[unused0] [unused99]", "text[SEP]glued"]
    s += ["a" * 99, "a" * 100, "a" * 101, "A" * 101, "x" * 3000, "!" * 300, "the " * 400, ". " * 300,
          "0123456789" * 40, "https://example.com/" + "path/" * 60, "Mixed CASE words ALL CAPS and camelCase",
          "tab\tnew\nline\rreturn", " leading and trailing ", "   ", "", "don't can't won't it's", "e.g. i.e. U.S.A.",
          "C++ C# F# .NET node.js", "$100 50% #1 @user ~home ^caret `tick` |pipe| \\back/slash", "{}[]()<>"]
    return s
