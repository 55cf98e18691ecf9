#!/usr/bin/env python3
"""Write the PNG decoder cases in tests/data/image/ (run once; outputs committed).

Each file holds the same deterministic 13x7 pattern (see pattern() here and
expect_pixel() in tests/image/test_png.c) in a different PNG layout: gray
1/2/8/16-bit, gray+alpha, RGB, RGBA 16-bit, palette with and without tRNS,
gray with a tRNS key, and Adam7 interlacing.  The encoder below is written
by hand (zlib + CRC from the standard library) so the cases do not depend
on the code under test or on any image library's choices, and every byte is
deterministic.  pil_text.png is written by Pillow exactly as A1111 writes
its metadata (PngInfo.add_text), to check we read what A1111 writes.

Pinned: Python 3.11, Pillow 11.x/12.x (only for pil_text.png).  No randomness.
"""
import os
import struct
import sys
import zlib

W, H = 13, 7
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "image")


def pattern(x, y, c):
    return (x * 37 + y * 101 + c * 53 + x * y * 7) & 255


def chunk(typ, data):
    return struct.pack(">I", len(data)) + typ + data + struct.pack(">I", zlib.crc32(typ + data))


def pack_row(samples, depth):
    if depth == 8:
        return bytes(samples)
    if depth == 16:
        return b"".join(struct.pack(">H", s) for s in samples)
    out, acc, nbits = bytearray(), 0, 0
    for s in samples:
        acc = (acc << depth) | s
        nbits += depth
        if nbits == 8:
            out.append(acc)
            acc, nbits = 0, 0
    if nbits:
        out.append(acc << (8 - nbits))
    return bytes(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def write_png(name, color_type, depth, pixel, interlace=False, extra=b""):
    """pixel(x, y) -> tuple of samples for one pixel."""
    raw = bytearray()
    if interlace:
        for x0, y0, dx, dy in ADAM7:
            xs = list(range(x0, W, dx))
            ys = list(range(y0, H, dy))
            if not xs or not ys:
                continue
            for y in ys:
                raw.append(0)
                raw += pack_row([s for x in xs for s in pixel(x, y)], depth)
    else:
        for y in range(H):
            raw.append(0)
            raw += pack_row([s for x in range(W) for s in pixel(x, y)], depth)
    ihdr = struct.pack(">IIBBBBB", W, H, depth, color_type, 0, 0, 1 if interlace else 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra
    data += chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b"")
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def palette_color(i):
    return ((i * 73) & 255, (i * 151 + 20) & 255, (255 - i * 13) & 255)


def main():
    os.makedirs(OUT, exist_ok=True)
    p = pattern
    write_png("gray8.png", 0, 8, lambda x, y: (p(x, y, 0),))
    write_png("gray1.png", 0, 1, lambda x, y: ((x ^ y) & 1,))
    write_png("gray2_adam7.png", 0, 2, lambda x, y: ((x + y) % 4,), interlace=True)
    write_png("gray16.png", 0, 16, lambda x, y: (p(x, y, 0) * 256 + ((x * y) & 255),))
    write_png("graya8.png", 4, 8, lambda x, y: (p(x, y, 0), p(x, y, 3)))
    write_png("rgb8.png", 2, 8, lambda x, y: (p(x, y, 0), p(x, y, 1), p(x, y, 2)))
    write_png("rgb8_adam7.png", 2, 8, lambda x, y: (p(x, y, 0), p(x, y, 1), p(x, y, 2)),
              interlace=True)
    write_png("rgba16.png", 6, 16,
              lambda x, y: tuple(p(x, y, c) * 256 + ((x + c) & 255) for c in range(4)))
    plte = chunk(b"PLTE", b"".join(bytes(palette_color(i)) for i in range(16)))
    trns = chunk(b"tRNS", bytes((i * 17) & 255 for i in range(16)))
    write_png("palette4_trns.png", 3, 4, lambda x, y: ((x + 3 * y) % 16,), extra=plte + trns)
    write_png("palette8.png", 3, 8, lambda x, y: ((x + 3 * y) % 16,), extra=plte)
    # gray with a tRNS key: value 37 (pattern at some pixels) is transparent
    write_png("gray8_trns.png", 0, 8, lambda x, y: (p(x, y, 0),),
              extra=chunk(b"tRNS", struct.pack(">H", 37)))

    if "--no-pil" not in sys.argv:
        from PIL import Image, PngImagePlugin
        img = Image.new("RGB", (4, 3), (10, 20, 30))
        info = PngImagePlugin.PngInfo()
        info.add_text("parameters", "caf\u00e9 au lait\nSteps: 20, Sampler: Euler a")  # tEXt
        info.add_text("prompt_ja", "\u732b\u3068\u72ac")                             # iTXt
        info.add_text("comment", "zipped latin-1 \u00fc", zip=True)                   # zTXt
        img.save(os.path.join(OUT, "pil_text.png"), pnginfo=info)


if __name__ == "__main__":
    main()
