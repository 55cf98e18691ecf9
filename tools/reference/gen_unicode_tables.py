#!/usr/bin/env python3
"""Generate text/unicode_tables.c: the Unicode data behind the CLIP tokenizer.

Why generated, and from what: the C tokenizer must reproduce
transformers.CLIPTokenizer (slow, with ftfy installed) and A1111's prompt
parser bit for bit.  Those run on three different Unicode engines, so every
table is measured from the engine that uses it, not from the UCD files:

  * the pre-tokenisation classes ([\\p{L}], [\\p{N}], \\s) come from the
    `regex` module with the exact flags CLIP uses (IGNORECASE);
  * whitespace stripping (str.strip), lowercasing (str.lower, including the
    final-sigma rule) and the A1111 parser's \\s, \\w and \\d come from
    CPython (`str` methods and the stdlib `re` module);
  * NFC composition data comes from `unicodedata`;
  * the ftfy fixes (HTML entities, C1 controls, ligatures, character width,
    quotes, control characters) come from ftfy's own tables.

Pinned: Python 3.11.7 (Unicode 14.0.0), regex 2026.11.19, ftfy 6.3.1.
Deterministic (no randomness).  Usage:
    . .venv/bin/activate && python tools/reference/gen_unicode_tables.py
"""
import html
import html.entities
import os
import re as stdre
import sys
import unicodedata

import ftfy
import ftfy.chardata as fcd
import regex

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "text", "unicode_tables.c")
MAXCP = 0x110000


def chars():
    for cp in range(MAXCP):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        yield cp


def ranges_of(pred):
    out = []
    lo = None
    prev = None
    for cp in chars():
        if pred(cp):
            if lo is not None and cp == prev + 1:
                prev = cp
                continue
            if lo is not None:
                out.append((lo, prev))
            lo = prev = cp
    if lo is not None:
        out.append((lo, prev))
    return out


def vranges_of(fn):
    """Ranges (lo, hi, v) of consecutive code points with equal nonzero fn."""
    out = []
    for cp in chars():
        v = fn(cp)
        if not v:
            continue
        if out and out[-1][1] == cp - 1 and out[-1][2] == v:
            out[-1] = (out[-1][0], cp, v)
        else:
            out.append((cp, cp, v))
    return out


def c_str(s):
    b = s.encode("utf-8")
    return '"' + "".join(
        chr(c) if 0x20 <= c < 0x7F and chr(c) not in '"\\?' else "\\%03o" % c for c in b) + '"'


def emit_ranges(f, name, rs):
    f.write("const tsr_u_range %s[] = {\n" % name)
    for lo, hi in rs:
        f.write("    {0x%X, 0x%X},\n" % (lo, hi))
    f.write("};\nconst size_t %s_n = %d;\n\n" % (name, len(rs)))


def emit_vranges(f, name, rs):
    f.write("const tsr_u_vrange %s[] = {\n" % name)
    for lo, hi, v in rs:
        f.write("    {0x%X, 0x%X, %d},\n" % (lo, hi, v))
    f.write("};\nconst size_t %s_n = %d;\n\n" % (name, len(rs)))


def emit_smap(f, name, m):
    f.write("const tsr_u_smap %s[] = {\n" % name)
    for cp in sorted(m):
        f.write("    {0x%X, %s},\n" % (cp, c_str(m[cp])))
    f.write("};\nconst size_t %s_n = %d;\n\n" % (name, len(m)))


def main():
    # ---- CLIP pre-tokenisation classes (regex module, IGNORECASE) ----
    pl = regex.compile(r"[\p{L}]", regex.IGNORECASE)
    pn = regex.compile(r"[\p{N}]", regex.IGNORECASE)
    po = regex.compile(r"[^\s\p{L}\p{N}]", regex.IGNORECASE)
    ps = regex.compile(r"\s")

    odd = []

    def cls(cp):
        # Bit set: 1 = [\p{L}], 2 = [\p{N}], 4 = [^\s\p{L}\p{N}] (all under
        # IGNORECASE).  Code points matched by none (whitespace, and oddities
        # such as U+0345) are skipped by findall.  Stored inverted against 4,
        # the common value for unassigned/punctuation, to keep ranges few.
        c = chr(cp)
        v = (1 if pl.fullmatch(c) else 0) | (2 if pn.fullmatch(c) else 0) | (4 if po.fullmatch(c) else 0)
        if v not in (1, 2, 4) and not (v == 0 and ps.fullmatch(c)):
            odd.append((cp, v))
        return v ^ 4

    clip_cls = vranges_of(cls)
    print("code points outside one CLIP class:", ["U+%04X:%d" % o for o in odd[:20]], len(odd))
    rx_space = ranges_of(lambda cp: bool(ps.fullmatch(chr(cp))))
    py_space = ranges_of(lambda cp: chr(cp).isspace())
    re_space = ranges_of(lambda cp: bool(stdre.fullmatch(r"\s", chr(cp))))
    re_word = ranges_of(lambda cp: bool(stdre.fullmatch(r"\w", chr(cp))))
    # \d of the stdlib re = decimal digits; float() accepts them too.
    re_digit = vranges_of(lambda cp: (unicodedata.decimal(chr(cp), -1) + 1)
                          if stdre.fullmatch(r"\d", chr(cp)) else 0)
    for lo, hi, v in re_digit:
        pass  # value-1 = the digit

    # ---- ASCII letters a code point matches under regex IGNORECASE ----
    fold = {}
    anyfold = regex.compile("[a-z]", regex.IGNORECASE)
    for cp in chars():
        if cp < 128:
            continue
        c = chr(cp)
        if not anyfold.fullmatch(c):
            continue
        for letter in "abcdefghijklmnopqrstuvwxyz":
            if regex.fullmatch(letter, c, regex.IGNORECASE):
                fold[cp] = letter

    # ---- str.lower ----
    lower1 = {}
    lowerm = {}
    for cp in chars():
        lc = chr(cp).lower()
        if lc == chr(cp):
            continue
        if len(lc) == 1:
            lower1[cp] = ord(lc)
        else:
            lowerm[cp] = lc
    # Final sigma: CPython lowers U+03A3 to U+03C2 when preceded by a cased
    # letter (skipping case-ignorables) and not followed by one.
    cased = ranges_of(lambda cp: cp != 0x3A3 and (chr(cp) + "\u03a3").lower()[-1] == "\u03c2")
    ignorable = ranges_of(lambda cp: cp != 0x3A3 and not (chr(cp) + "\u03a3").lower()[-1] == "\u03c2"
                          and ("A" + chr(cp) + "\u03a3").lower()[-1] == "\u03c2")

    # ---- NFC ----
    ccc = vranges_of(lambda cp: unicodedata.combining(chr(cp)))
    decomp = {}
    comp = {}
    for cp in chars():
        d = unicodedata.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        decomp[cp] = parts
        if len(parts) == 2 and unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) == chr(cp):
            comp[(parts[0], parts[1])] = cp
    assert all(1 <= len(p) <= 2 for p in decomp.values())

    # ---- ftfy ----
    width = {cp: s for cp, s in fcd.WIDTH_MAP.items()}
    lig = {cp: s for cp, s in fcd.LIGATURES.items()}
    c1 = {}
    for cp in range(0x80, 0xA0):
        s = bytes([cp]).decode("sloppy-windows-1252")
        if s != chr(cp):
            c1[cp] = s
    control = sorted(fcd.CONTROL_CHARS.keys())
    # Only names the entity pattern can match are reachable.
    ents = {k: v for k, v in fcd.HTML_ENTITIES.items() if fcd.HTML_ENTITY_RE.fullmatch(k)}
    inv_ref = dict(html._invalid_charrefs)
    inv_cp = sorted(html._invalid_codepoints)
    # Self-checks of assumptions the C code makes about ftfy.
    assert fcd.SINGLE_QUOTE_RE.pattern == "[\u02bc\u2018-\u201b]"
    assert fcd.DOUBLE_QUOTE_RE.pattern == "[\u201c-\u201f]"
    assert fcd.HTML_ENTITY_RE.pattern == r"&#?[0-9A-Za-z]{1,24};"
    assert ftfy.fixes.ANSI_RE.pattern == "\033\\[((?:\\d|;)*)([a-zA-Z])"
    for name in ents:
        assert name.startswith("&") and name.endswith(";") and len(name) <= 27

    with open(OUT, "w", encoding="ascii") as f:
        f.write("/*\n * text/unicode_tables.c - GENERATED by tools/reference/gen_unicode_tables.py;\n"
                " * do not edit.  Unicode data measured from the engines the CLIP tokenizer\n"
                " * and A1111's parser run on (Python %s, Unicode %s, regex %s, ftfy %s),\n"
                " * so that the C code reproduces them exactly.  Sorted ranges, searched\n"
                " * by bisection in text/unicode.c.\n */\n"
                % (sys.version.split()[0], unicodedata.unidata_version, regex.__version__,
                   ftfy.__version__))
        f.write('#include "text/unicode.h"\n\n')
        f.write("/* CLIP classes XOR 4: bit 1 = [\\p{L}], 2 = [\\p{N}], 4 = [^\\s\\p{L}\\p{N}]. */\n")
        emit_vranges(f, "tsr_u_clip_class", clip_cls)
        f.write("/* regex \\s (CLIP's whitespace_clean). */\n")
        emit_ranges(f, "tsr_u_rx_space", rx_space)
        f.write("/* str.isspace() (str.strip). */\n")
        emit_ranges(f, "tsr_u_py_space", py_space)
        f.write("/* stdlib re: \\s and \\w. */\n")
        emit_ranges(f, "tsr_u_re_space", re_space)
        emit_ranges(f, "tsr_u_re_word", re_word)
        f.write("/* stdlib re \\d; value = digit + 1. */\n")
        emit_vranges(f, "tsr_u_re_digit", re_digit)
        f.write("/* Non-ASCII code points equal to an ASCII letter under regex IGNORECASE. */\n")
        f.write("const tsr_u_map tsr_u_fold_ascii[] = {\n")
        for cp in sorted(fold):
            f.write("    {0x%X, '%s'},\n" % (cp, fold[cp]))
        f.write("};\nconst size_t tsr_u_fold_ascii_n = %d;\n\n" % len(fold))
        f.write("/* str.lower(): single code point mappings, then the longer ones. */\n")
        f.write("const tsr_u_map tsr_u_lower[] = {\n")
        for cp in sorted(lower1):
            f.write("    {0x%X, 0x%X},\n" % (cp, lower1[cp]))
        f.write("};\nconst size_t tsr_u_lower_n = %d;\n\n" % len(lower1))
        emit_smap(f, "tsr_u_lower_multi", lowerm)
        emit_ranges(f, "tsr_u_cased", cased)
        emit_ranges(f, "tsr_u_case_ignorable", ignorable)
        f.write("/* NFC: canonical combining classes, decompositions, compositions. */\n")
        emit_vranges(f, "tsr_u_ccc", ccc)
        f.write("const tsr_u_decomp tsr_u_decomp_tab[] = {\n")
        for cp in sorted(decomp):
            p = decomp[cp] + [0]
            f.write("    {0x%X, 0x%X, 0x%X},\n" % (cp, p[0], p[1]))
        f.write("};\nconst size_t tsr_u_decomp_tab_n = %d;\n\n" % len(decomp))
        f.write("const tsr_u_comp tsr_u_comp_tab[] = {\n")
        for (a, b) in sorted(comp):
            f.write("    {0x%X, 0x%X, 0x%X},\n" % (a, b, comp[(a, b)]))
        f.write("};\nconst size_t tsr_u_comp_tab_n = %d;\n\n" % len(comp))
        f.write("/* ftfy 6.3.1 translate tables. */\n")
        emit_smap(f, "tsr_u_ftfy_width", width)
        emit_smap(f, "tsr_u_ftfy_ligature", lig)
        emit_smap(f, "tsr_u_ftfy_c1", c1)
        emit_ranges(f, "tsr_u_ftfy_control",
                    [(lo, hi) for lo, hi in ranges_of(lambda cp: cp in fcd.CONTROL_CHARS)])
        f.write("/* ftfy.chardata.HTML_ENTITIES, sorted by strcmp of the name. */\n")
        f.write("const tsr_u_entity tsr_u_entities[] = {\n")
        for name in sorted(ents, key=lambda s: s.encode("utf-8")):
            f.write("    {%s, %s},\n" % (c_str(name), c_str(ents[name])))
        f.write("};\nconst size_t tsr_u_entities_n = %d;\n\n" % len(ents))
        f.write("/* html.unescape numeric references: remapped, then dropped. */\n")
        emit_smap(f, "tsr_u_html_invalid_charref", inv_ref)
        emit_ranges(f, "tsr_u_html_invalid_cp", ranges_of(lambda cp: cp in html._invalid_codepoints))
    print("wrote %s: %d class ranges, %d lower, %d decomp, %d comp, %d entities, %d fold"
          % (OUT, len(clip_cls), len(lower1), len(decomp), len(comp), len(ents), len(fold)))
    _ = control, inv_cp


if __name__ == "__main__":
    main()
