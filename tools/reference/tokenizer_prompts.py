#!/usr/bin/env python3
"""The generated prompt sets of the tokenizer goldens, shared by
make_tokenizer_goldens.py (transformers 4.57.1, slow + ftfy: the a1111 mode)
and make_tokenizer_goldens_tf5.py (transformers 5: the default mode), so
both modes are checked on the same prompts.  Pure Python, deterministic
(random.Random with fixed seeds); no third-party imports.
Also the A1111 reference parser and chunker both generators run on them.
"""
import random
import re
import unicodedata

WORDS = ("a photo of an astronaut riding horse on mars cat dog portrait woman man city night "
         "cyberpunk landscape mountains lake sunset highly detailed 8k octane render trending "
         "artstation concept art by greg rutkowski masterpiece best quality ultra realistic "
         "cinematic lighting sharp focus oil painting watercolor anime girl blue eyes red hair "
         "forest castle dragon fantasy steampunk robot spaceship ocean waves beach sky clouds "
         "flowers garden old wooden house snow winter autumn leaves rain reflections neon "
         "studio ghibli pixar 3d unreal engine bokeh depth of field hdr volumetric fog golden "
         "hour it's don't I'LL they're we've she'd you'RE can't won't").split()
ACCENTS = ["café", "crème brûlée", "naïve", "façade", "Straße", "Ärger", "Øresund", "Ångström",
           "Müller", "señor", "jalapeño", "İstanbul", "ıslak", "ΟΔΟΣ", "Σίσυφος", "ΣΑΣ ΣΟΣ",
           "Москва", "ПРИВЕТ мир", "Ελληνικά", "Đà Nẵng", "Tiếng Việt", "Œuvre", "ǅemal", "ŉ",
           "ﬁne ﬂower ﬀ ﬃ", "ĳssel", "ǈubljana", "ß ẞ", "ſtraße", "K Kelvin", "Ω ohm", "µ micro",
           "עברית", "العربية", "हिन्दी", "ไทย", "ქართული", "Հայերեն", "ᎠᏍᎦᏯ", "ꙮ"]
CJK = ["一只猫在月亮上", "東京の夜景", "こんにちは世界", "カタカナ", "ｶﾀｶﾅ ﾊﾝｶｸ", "한국어 텍스트",
       "서울의 밤", "漢字と仮名", "中文，标点。", "「引用」『二重』", "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ",
       "１２３　４５６", "龍", "𠮷野家", "ㄅㄆㄇ", "한", "가각갂"]
EMOJI = ["😀", "🐱‍👤", "👩🏽‍🚀", "🇯🇵", "❤️", "✨🌙", "🏳️‍🌈", "👍🏿", "🧑‍🎨", "☕", "⚡", "🦄🌈",
         "1️⃣", "©®™", "♪♫", "★☆", "→←↑↓", "∞≠≈", "°C", "€$£¥₹"]
DIGITS = ["1024x768", "3.14159", "2023", "007", "1,000,000", "4k", "8K UHD", "v1.5", "12:30",
          "٣٤٥", "१२३", "²³¹", "½ ¼ ¾", "Ⅻ ⅻ", "①②③", "𝟏𝟐𝟑", "0.5x", "-42", "+7", "50%"]
PUNCT = ["!", "?", "...", "…", "—", "–", "-", "_", "/", "\\", "|", "@", "#", "$", "%", "^", "&",
         "*", "~", "`", "'", '"', "“quoted”", "‘single’", "«guillemets»", "„low“", "‹›", "(", ")",
         "[", "]", "{", "}", "<", ">", ":", ";", ",", ".", "!!!", "?!", "''", "'s", "'T", "'re",
         "'ve", "'m", "'ll", "'d", "ʼ", "′", "″", "·", "•", "§", "¶", "†", "¿¡"]
ENTITIES = ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;", "&#x27;", "&nbsp;", "&eacute;", "&EACUTE;",
            "&Eacute;", "&hellip;", "&mdash;", "&#128512;", "&#x1F600;", "&#0;", "&#59;", "&#xD800;",
            "&#1114112;", "&#128;", "&#x9F;", "&#13;", "&#x0B;", "&amp;amp;", "&amp;lt;", "&copy;",
            "&copy", "&nosuch;", "&#12a;", "&#x;", "&#;", "&NTILDE;", "&ntilde;", "&frac12;",
            "&aaaaaaaaaaaaaaaaaaaaaaaaa;", "&#00000000000000000000065;", "&Aacute;", "&bigstar;",
            "&nbsp;&nbsp;", "&#x2028;", "&#133;", "&#8217;", "&lsquo;", "&rdquo;", "&#65279;"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\u3000", "\u00a0", "\u2003", "\u200b",
          "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1f", "\u180e", "\ufeff", " \n \n "]
CONTROL = ["\x00", "\x01", "\x07", "\x1b[31m", "\x1b[0m", "\x1b[1;32;40m", "\x7f", "\x80", "\x81",
           "\x91", "\x96", "\x9d", "\u206a", "\ufff9", "\ufffc", "\U000e0041", "\u200d", "\u200e",
           "\u0345", "a\u0345b", "\U0001d173"]
SYNTAX = ["(masterpiece)", "((best quality))", "(((extreme)))", "[blurry]", "[[lowres]]",
          "(red hair:1.3)", "(blue:0.5)", "(word: 1.2 )", "(a:-1)", "(x:+.5)", "\\(escaped\\)",
          "\\[x\\]", "\\\\", "BREAK", "a BREAK b", "(unbalanced", "unbalanced)", "[open", "close]",
          "(a [b] c)", "[(mixed)]", ":", "(:1.1)", "a:b", "(nested (deep:1.5) x)", "BREAKfast",
          "<lora:foo:0.8>", "{a|b}", "[a:b:10]", "[a|b]", "AND", "embedding:xyz"]
SPECIAL = ["<|startoftext|>", "<|endoftext|>", "<|ENDOFTEXT|>", "<|startoftext|>a", "x<|endoftext|>y",
           "!<|endoftext|>", "<|endoftext", "|endoftext|>", "<|ſtartoftext|>", "<| endoftext |>"]
RANDOM_BLOCKS = [(0x20, 0x7E), (0xA0, 0x17F), (0x180, 0x24F), (0x300, 0x36F), (0x370, 0x3FF),
                 (0x400, 0x4FF), (0x590, 0x6FF), (0x900, 0x97F), (0x1100, 0x11FF),
                 (0x1E00, 0x1EFF), (0x2000, 0x206F), (0x2100, 0x214F), (0x2150, 0x218F),
                 (0x2460, 0x24FF), (0x3000, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00),
                 (0xFB00, 0xFB4F), (0xFE30, 0xFE4F), (0xFF00, 0xFFEF), (0x1D400, 0x1D4FF),
                 (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF)]


def rand_words(r, n):
    return [r.choice(WORDS) for _ in range(n)]


def make_prompts():
    r = random.Random(20240601)
    out = []
    pools = [ACCENTS, CJK, EMOJI, DIGITS, PUNCT, ENTITIES, SPACES, CONTROL, SYNTAX, SPECIAL]
    for pool in pools:  # every item alone and inside text
        for item in pool:
            out.append(item)
            out.append("a " + item + " b")
    for item in ACCENTS + CJK:
        out.append(unicodedata.normalize("NFD", item))
        out.append(item.upper())
    for _ in range(700):  # SD-style prompts mixing everything
        parts = []
        for _ in range(r.randint(1, 12)):
            k = r.random()
            if k < 0.55:
                parts.append(" ".join(rand_words(r, r.randint(1, 4))))
            else:
                parts.append(r.choice(r.choice(pools)))
        sep = r.choice([", ", ",", " ", ". ", " | ", ",  ", "\n"])
        out.append(sep.join(parts))
    for _ in range(400):  # case and spacing variants of plain prompts
        s = ", ".join(" ".join(rand_words(r, r.randint(1, 5))) for _ in range(r.randint(1, 8)))
        s = r.choice([s, s.upper(), s.title(), "  " + s + "  ", s.replace(" ", "   ")])
        out.append(s)
    for _ in range(300):  # random code points
        n = r.randint(1, 30)
        s = []
        for _ in range(n):
            lo, hi = r.choice(RANDOM_BLOCKS)
            cp = r.randint(lo, hi)
            if 0xD800 <= cp <= 0xDFFF:
                continue
            s.append(chr(cp))
        out.append("".join(s))
    for _ in range(150):  # digits and punctuation runs
        s = "".join(r.choice("0123456789.,:;!?-+/x%$#'\"()[] ") for _ in range(r.randint(1, 40)))
        out.append(s)
    for _ in range(30):  # very long prompts (truncated to 75 tokens)
        s = ", ".join(" ".join(rand_words(r, r.randint(1, 5))) for _ in range(r.randint(30, 120)))
        out.append(s)
    out.append("x" * 1000)
    out.append("abc" * 700)
    out.append("😀" * 200)
    out.append(" ".join(["supercalifragilisticexpialidocious"] * 40))
    out.append("")
    out.append("     ")
    out.append("\n\n")
    seen = set()
    uniq = []
    for s in out:
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    return uniq


def make_syntax_prompts():
    r = random.Random(77)
    out = list(SYNTAX)
    out += ["", "   ", "()", "[]", "(((", ")))", "[[[", "]]]", "(:)", "(a:)", "(a:.)", "(a:1.2.3)",
            "(a:1e3)", "(a:١.٥)", "(a:\u00a01.5\u3000)", "\\", "a\\", "\\a", "(a\\)", "BREAK BREAK",
            "aBREAK", "BREAK_x", "(a BREAK b)", "[a BREAK b]", "a\nBREAK\nb", "  BREAK  ", "ÀBREAK",
            "(a:1.1)(b:1.1)", "((a)(b))", "[[a]](b)", "(a:0)", "(a:-0.5)", "(a:+1)", "(a:99999)",
            "(a:00001.50000)", "(: 1.2)", "(a :1.2)", "(a:1.2 )", "(a: 1.2\t)", "(a:1.2\n)"]
    atoms = ["cat", "dog", "red hair", "best quality", "masterpiece", "1girl", "solo", "sky",
             ",", ", ", "BREAK", "(", ")", "[", "]", ":1.2)", ":0.8)", "\\(", "\\)", "\\\\", ":",
             "é", "猫", "😀", "&amp;", " ", "'s"]
    for _ in range(260):
        n = r.randint(1, 25)
        out.append("".join(r.choice(atoms) + r.choice(["", " ", ", "]) for _ in range(n)))
    for _ in range(60):  # long prompts: chunking and comma backtracking
        parts = []
        for _ in range(r.randint(20, 80)):
            w = " ".join(rand_words(r, r.randint(1, 6)))
            k = r.random()
            if k < 0.15:
                w = "(%s:%.2f)" % (w, r.uniform(0.3, 1.8))
            elif k < 0.25:
                w = "[" + w + "]"
            elif k < 0.3:
                w = "BREAK " + w
            parts.append(w)
        out.append(r.choice([", ", " ", ","]).join(parts))
    out.append("(" * 200 + "x" + ")" * 200)
    out.append(", ".join(["word"] * 300))
    out.append(" ".join(["word"] * 300))
    seen = set()
    return [s for s in out if not (s in seen or seen.add(s))]


# ------------------------------------------------ A1111 reference parser
# A reimplementation of AUTOMATIC1111 stable-diffusion-webui
# modules/prompt_parser.py parse_prompt_attention (emphasis "Original").

RE_ATTENTION = re.compile(r"""
\\\(|
\\\)|
\\\[|
\\]|
\\\\|
\\|
\(|
\[|
:\s*([+-]?[.\d]+)\s*\)|
\)|
]|
[^\\()\[\]:]+|
:
""", re.X)
RE_BREAK = re.compile(r"\s*\bBREAK\b\s*", re.S)


def parse_prompt_attention(text):
    res = []
    round_brackets = []
    square_brackets = []

    def multiply_range(start, mult):
        for p in range(start, len(res)):
            res[p][1] *= mult

    for m in RE_ATTENTION.finditer(text):
        t = m.group(0)
        weight = m.group(1)
        if t.startswith("\\"):
            res.append([t[1:], 1.0])
        elif t == "(":
            round_brackets.append(len(res))
        elif t == "[":
            square_brackets.append(len(res))
        elif weight is not None and round_brackets:
            multiply_range(round_brackets.pop(), float(weight))  # may raise ValueError
        elif t == ")" and round_brackets:
            multiply_range(round_brackets.pop(), 1.1)
        elif t == "]" and square_brackets:
            multiply_range(square_brackets.pop(), 1 / 1.1)
        else:
            for i, part in enumerate(re.split(RE_BREAK, t)):
                if i > 0:
                    res.append(["BREAK", -1])
                res.append([part, 1.0])
    for pos in round_brackets:
        multiply_range(pos, 1.1)
    for pos in square_brackets:
        multiply_range(pos, 1 / 1.1)
    if len(res) == 0:
        res = [["", 1.0]]
    i = 0
    while i + 1 < len(res):
        if res[i][1] == res[i + 1][1]:
            res[i][0] += res[i + 1][0]
            res.pop(i + 1)
        else:
            i += 1
    return res


def chunk_prompt(tok, parsed, backtrack=20):
    """A1111 tokenize_line (sd_hijack_clip.py), with the chunk layout
    [BOS] tokens [EOS] [PAD]* that transformers uses for one window."""
    bos, eos, pad = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
    comma = tok.get_vocab().get(",</w>")
    texts = [t for t, _ in parsed]
    tokenized = tok(texts, truncation=False, add_special_tokens=False)["input_ids"]
    chunks = []
    cur = {"t": [], "w": []}
    state = {"last_comma": -1}

    def next_chunk():
        nonlocal cur
        t = [bos] + cur["t"] + [eos] + [pad] * (75 - len(cur["t"]))
        w = [1.0] + cur["w"] + [1.0] + [1.0] * (75 - len(cur["t"]))
        chunks.append((t, w))
        state["last_comma"] = -1
        cur = {"t": [], "w": []}

    for tokens, (text, weight) in zip(tokenized, parsed):
        if text == "BREAK" and weight == -1:
            next_chunk()
            continue
        pos = 0
        while pos < len(tokens):
            token = tokens[pos]
            if token == comma:
                state["last_comma"] = len(cur["t"])
            elif (backtrack != 0 and len(cur["t"]) == 75 and state["last_comma"] != -1
                  and len(cur["t"]) - state["last_comma"] <= backtrack):
                brk = state["last_comma"] + 1
                rt, rw = cur["t"][brk:], cur["w"][brk:]
                cur["t"], cur["w"] = cur["t"][:brk], cur["w"][:brk]
                next_chunk()
                cur["t"], cur["w"] = rt, rw
            if len(cur["t"]) == 75:
                next_chunk()
            cur["t"].append(token)
            cur["w"].append(weight)
            pos += 1
    if cur["t"] or not chunks:
        next_chunk()
    return chunks


def syntax_records(tok, prompts):
    """The prompt_golden records: A1111's parse of each prompt and its chunks
    (ids and weight runs, trailing padding dropped) with tokenizer `tok`."""
    recs = []
    for p in prompts:
        try:
            parsed = parse_prompt_attention(p)
        except ValueError:
            recs.append({"p": p, "error": True})
            continue
        chunks = chunk_prompt(tok, parsed)
        rec = {"p": p, "parse": parsed, "ids": [], "w": []}
        for t, w in chunks:
            end = len(t)
            while end > 0 and t[end - 1] == tok.pad_token_id and w[end - 1] == 1.0:
                end -= 1
            rec["ids"].append(t[:end])
            runs = []  # weights as [value, count] runs
            for x in w[:end]:
                x = float("%.9g" % x)
                if runs and runs[-1][0] == x:
                    runs[-1][1] += 1
                else:
                    runs.append([x, 1])
            rec["w"].append(runs)
        recs.append(rec)
    return recs
