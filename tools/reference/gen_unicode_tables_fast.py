#!/usr/bin/env python3
"""Generate text/unicode_tables_fast.c: the Unicode data behind the default
("transformers >= 5") CLIP tokenizer mode.

Why a second set of tables: transformers 5's CLIPTokenizer is the
tokenizers-backed one.  Its cleanup is a `tokenizers` normalizer
Sequence[NFC, Replace(\\s+ -> " "), Lowercase] and its pre-tokeniser a
Split on CLIP's pattern (no IGNORECASE) followed by ByteLevel.  Those run on
Rust engines with their own Unicode data, which differ from the Python
engines the slow tokenizer uses (text/unicode_tables.c):

  * NFC comes from the `unicode-normalization-alignments` crate, whose data
    is older than Python 3.11's Unicode 14 (e.g. U+0898..U+089F have
    combining class 0 there, and U+11938 does not decompose);
  * Lowercase is Rust's char::to_lowercase, one code point at a time (newer
    Unicode than Python 3.11; no final-sigma rule);
  * \\s, \\p{L} and \\p{N} are Oniguruma's.

So every table is measured from the tokenizers library itself, by running
its normalizers and pre-tokeniser on each code point, and the NFC tables
are checked by re-implementing the C algorithm here and comparing it with
the library on every code point and on random mark sequences.

Pinned: tokenizers 0.23.3 (transformers 5.24.0), in the venv that
tools/reference/setup-venv-tf5.sh makes.  Deterministic.  Usage:
    /work/venv-tf5/bin/python tools/reference/gen_unicode_tables_fast.py
"""
import os
import random
import sys
import unicodedata

import tokenizers
from tokenizers import Regex, normalizers, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "text", "unicode_tables_fast.c")
MAXCP = 0x110000


# The same helpers as gen_unicode_tables.py (not imported: that script needs
# ftfy and regex, which this venv does not have).
def chars():
    for cp in range(MAXCP):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        yield cp


def ranges_of(pred):
    out = []
    for cp in chars():
        if pred(cp):
            if out and out[-1][1] == cp - 1:
                out[-1] = (out[-1][0], cp)
            else:
                out.append((cp, cp))
    return out


def vranges_of(fn):
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


CLIP_PATTERN = (r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|"
                r"[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+")

NFC = normalizers.NFC()
NFD = normalizers.NFD()
LOWER = normalizers.Lowercase()
SPACE = normalizers.Replace(Regex(r"\s+"), " ")
SPLIT = pre_tokenizers.Split(Regex(CLIP_PATTERN), behavior="removed", invert=True)


def pieces(s):
    return [p for p, _ in SPLIT.pre_tokenize_str(s)]


def clip_class(cp):
    """1 = [\\p{L}], 2 = [\\p{N}], 4 = [^\\s\\p{L}\\p{N}], 0 = \\s (dropped)."""
    c = chr(cp)
    if cp in (ord("<"), ord("'")):
        return 4  # punctuation; the literal branches are handled in C
    p = pieces(c)
    if not p:
        return 0
    assert p == [c], (hex(cp), p)
    if pieces("a" + c) == ["a" + c]:
        assert pieces(c + c) == [c + c]
        return 1
    if pieces("!" + c) == ["!" + c]:
        return 4
    assert pieces(c + c) == [c, c], hex(cp)
    return 2


# ---- NFC, as text/unicode.c computes it, on candidate tables ----

def main():
    print("tokenizers", tokenizers.__version__)
    # ---- classes and whitespace ----
    cls = vranges_of(lambda cp: clip_class(cp) ^ 4)
    space = ranges_of(lambda cp: SPACE.normalize_str("a" + chr(cp) + "b") == "a b")
    for lo, hi in space:
        for cp in range(lo, hi + 1):
            assert clip_class(cp) == 0, hex(cp)
    # ---- Lowercase (per code point) ----
    lower1, lowerm = {}, {}
    for cp in chars():
        lc = LOWER.normalize_str(chr(cp))
        if lc == chr(cp):
            continue
        if len(lc) == 1:
            lower1[cp] = ord(lc)
        else:
            lowerm[cp] = lc
    assert LOWER.normalize_str("ΟΔΟΣ") == "οδοσ"  # no final sigma
    # ---- NFC ----
    # Combining classes: the reference marks have the same class in both
    # engines (checked); every other candidate is placed between them.
    refs = {}
    for cp in chars():  # the oldest mark of each class that the library also moves
        v = unicodedata.combining(chr(cp))
        if v and v not in refs and NFD.normalize_str(chr(cp)) == chr(cp):
            probe = "\u0301" if v == 240 else "\u0345"
            if NFD.normalize_str(probe + chr(cp)) != probe + chr(cp) or \
                    NFD.normalize_str(chr(cp) + probe) != chr(cp) + probe:
                refs[v] = cp
    ref_list = sorted(refs.items())  # [(ccc, cp)]
    for v1, r1 in ref_list:  # they sort as Python's classes say
        for v2, r2 in ref_list:
            assert (NFD.normalize_str(chr(r1) + chr(r2)) != chr(r1) + chr(r2)) == (v1 > v2)

    def ccc_tk(cp):
        c = chr(cp)
        # largest reference class r with "r c" not swapped, when c moves at all
        below = [v for v, r in ref_list if NFD.normalize_str(chr(r) + c) == chr(r) + c]
        above = [v for v, r in ref_list if NFD.normalize_str(c + chr(r)) == c + chr(r)]
        if len(below) == len(ref_list) and len(above) == len(ref_list):
            return 0
        lo = max(below) if below else 0
        hi = min(above) if above else 999
        assert lo == hi, (hex(cp), lo, hi)
        return lo

    # Candidates: marks in Python's table, and anything U+0345 or U+0301 moves past.
    cand = set()
    for cp in chars():
        c = chr(cp)
        if unicodedata.combining(c):
            cand.add(cp)
        elif NFD.normalize_str(c) == c and (NFD.normalize_str("\u0345" + c) != "\u0345" + c):
            cand.add(cp)
    for v, r in ref_list:
        assert ccc_tk(r) == v, ("reference mark differs", hex(r), v)
    ccc_map = {}
    for cp in sorted(cand):
        # A decomposing code point's class is its own entry (it is never
        # seen after decomposition); take Python's for those.
        v = ccc_tk(cp) if NFD.normalize_str(chr(cp)) == chr(cp) else unicodedata.combining(chr(cp))
        if v:
            ccc_map[cp] = v
    ccc = vranges_of(lambda cp: ccc_map.get(cp, 0))
    # Decompositions: Python's canonical ones that the library also applies.
    decomp, comp = {}, {}
    for cp in chars():
        c = chr(cp)
        full = NFD.normalize_str(c)
        d = unicodedata.decomposition(c)
        canon = d and not d.startswith("<")
        if not canon:
            assert full == c or 0xAC00 <= cp <= 0xD7A3, ("decomposes only in tokenizers", hex(cp))
            continue
        if full == c:
            continue  # newer than the library's data (U+11938)
        parts = [int(x, 16) for x in d.split()]
        decomp[cp] = parts
    for cp, parts in decomp.items():
        if len(parts) == 2 and NFC.normalize_str(chr(parts[0]) + chr(parts[1])) == chr(cp):
            comp[(parts[0], parts[1])] = cp

    # ---- check: a Python copy of text/unicode.c's tsr_u_nfc on these tables ----
    def cc(cp):
        return ccc_map.get(cp, 0)

    def decompose(cp, out):
        if 0xAC00 <= cp <= 0xD7A3:
            out.extend(ord(x) for x in unicodedata.normalize("NFD", chr(cp)))
            return
        if cp in decomp:
            for p in decomp[cp]:
                decompose(p, out)
        else:
            out.append(cp)

    def compose_pair(a, b):
        if 0x1100 <= a < 0x1113 and 0x1161 <= b < 0x1176:
            return 0xAC00 + ((a - 0x1100) * 21 + (b - 0x1161)) * 28
        if 0xAC00 <= a <= 0xD7A3 and (a - 0xAC00) % 28 == 0 and 0x11A7 < b < 0x11C3:
            return a + (b - 0x11A7)
        return comp.get((a, b), 0)

    def nfc(s):
        d = []
        for ch in s:
            decompose(ord(ch), d)
        for i in range(1, len(d)):
            c = d[i]
            k = cc(c)
            if k == 0:
                continue
            j = i
            while j > 0 and cc(d[j - 1]) > k:
                d[j] = d[j - 1]
                j -= 1
            d[j] = c
        out, starter, last = [], -1, 0
        for c in d:
            k = cc(c)
            if starter >= 0 and (starter == len(out) - 1 or (last != 0 and last < k)):
                x = compose_pair(out[starter], c)
                if x:
                    out[starter] = x
                    continue
            if k == 0:
                starter, last = len(out), 0
            else:
                last = k
            out.append(c)
        return "".join(map(chr, out))

    bad = [hex(cp) for cp in chars() if nfc(chr(cp)) != NFC.normalize_str(chr(cp))]
    assert not bad, bad[:20]
    rnd = random.Random(9)
    marks = sorted(cand) + [0x300, 0x301, 0x323, 0x345, 0x1100, 0x1161, 0x11A8]
    bases = [0x41, 0x61, 0x45, 0x4F, 0x55, 0x3B1, 0x3C9, 0x415, 0x928, 0x9C7, 0xB47, 0x1100, 0xAC00,
             0x11935, 0x11930, 0x0B92, 0x0BC6, 0x1025, 0x1B05, 0x11099]
    bases += [a for a, b in comp] + [b for a, b in comp]
    for _ in range(200000):
        s = "".join(chr(rnd.choice(bases if rnd.random() < 0.4 else marks))
                    for _ in range(rnd.randint(1, 6)))
        assert nfc(s) == NFC.normalize_str(s), [hex(ord(x)) for x in s]
    print("NFC checked: %d candidates, %d decompositions, %d compositions" % (
        len(cand), len(decomp), len(comp)))

    with open(OUT, "w", encoding="ascii") as f:
        f.write("/*\n * text/unicode_tables_fast.c - GENERATED by tools/reference/gen_unicode_tables_fast.py;\n"
                " * do not edit.  Unicode data of transformers 5's CLIPTokenizer, measured from\n"
                " * the `tokenizers` library (%s) it runs on: Oniguruma's classes, Rust's\n"
                " * per-character lowercase and the library's NFC data.  Sorted ranges,\n"
                " * searched by bisection in text/unicode.c.\n */\n" % tokenizers.__version__)
        f.write('#include "text/unicode.h"\n\n')
        f.write("/* CLIP classes XOR 4: bit 1 = [\\p{L}], 2 = [\\p{N}], 4 = [^\\s\\p{L}\\p{N}];\n"
                " * 4 (stored 0) = whitespace, dropped. */\n")
        emit_vranges(f, "tsr_uf_clip_class", cls)
        f.write("/* \\s of the Replace(\\s+, \" \") normalizer. */\n")
        emit_ranges(f, "tsr_uf_space", space)
        f.write("/* Lowercase normalizer: single code point mappings, then the longer ones. */\n")
        f.write("const tsr_u_map tsr_uf_lower[] = {\n")
        for cp in sorted(lower1):
            f.write("    {0x%X, 0x%X},\n" % (cp, lower1[cp]))
        f.write("};\nconst size_t tsr_uf_lower_n = %d;\n\n" % len(lower1))
        emit_smap(f, "tsr_uf_lower_multi", lowerm)
        f.write("/* NFC normalizer: canonical combining classes, decompositions, compositions. */\n")
        emit_vranges(f, "tsr_uf_ccc", ccc)
        f.write("const tsr_u_decomp tsr_uf_decomp_tab[] = {\n")
        for cp in sorted(decomp):
            p = decomp[cp] + [0]
            f.write("    {0x%X, 0x%X, 0x%X},\n" % (cp, p[0], p[1]))
        f.write("};\nconst size_t tsr_uf_decomp_tab_n = %d;\n\n" % len(decomp))
        f.write("const tsr_u_comp tsr_uf_comp_tab[] = {\n")
        for (a, b) in sorted(comp):
            f.write("    {0x%X, 0x%X, 0x%X},\n" % (a, b, comp[(a, b)]))
        f.write("};\nconst size_t tsr_uf_comp_tab_n = %d;\n" % len(comp))
    print("wrote %s: %d class ranges, %d space ranges, %d lower (+%d multi), %d ccc ranges"
          % (OUT, len(cls), len(space), len(lower1), len(lowerm), len(ccc)))


if __name__ == "__main__":
    main()
