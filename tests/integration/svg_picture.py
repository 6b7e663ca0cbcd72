"""Checks a picture the way a person sees it: the SVG rendered to PNG by a real renderer
(rsvg-convert, Debian's librsvg2-bin), then each <text> rendered alone to find the pixels it
covers. Every text must lie inside the canvas and no two texts may share a pixel.

    python3 svg_picture.py FILE.svg [OUT.png]   prints the boxes and what is wrong; exit 1 if any

The texts are found by rendering, not by estimating font metrics, so the check holds whatever
font the renderer picks. PNG decoding needs only zlib and numpy.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
import zlib

import numpy

SVG_NS = "http://www.w3.org/2000/svg"
MARGIN = 200  # rendered around the canvas, so that text outside it shows up too


def renderer():
    path = shutil.which("rsvg-convert")
    if path is None:
        raise AssertionError("rsvg-convert is missing (Debian: librsvg2-bin)")
    return path


def render_png(svg_path, png_path):
    result = subprocess.run([renderer(), "-o", png_path, svg_path], capture_output=True,
                            text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"rsvg-convert {svg_path}: {result.stderr.strip()}")


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read_png(path):
    """An 8-bit RGBA or RGB, non-interlaced PNG as a numpy array [height, width, channels]."""
    with open(path, "rb") as file:
        data = file.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError(f"{path} is not a PNG")
    offset, idat, header = 8, [], None
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        body = data[offset + 8:offset + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        offset += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace != 0:
        raise AssertionError(f"{path}: PNG depth {depth} colour type {colour} not supported")
    channels = 4 if colour == 6 else 3
    stride = width * channels
    raw = numpy.frombuffer(zlib.decompress(b"".join(idat)), dtype=numpy.uint8)
    raw = raw.reshape(height, stride + 1)
    image = numpy.zeros((height, stride), dtype=numpy.uint8)
    prior = numpy.zeros(stride, dtype=numpy.uint8)
    for row in range(height):
        kind, line = raw[row, 0], raw[row, 1:]
        if not line.any() and not prior.any():
            recon = numpy.zeros(stride, dtype=numpy.uint8)  # every filter keeps zero as zero
        elif kind == 0:
            recon = line.copy()
        elif kind == 2:
            recon = (line.astype(numpy.uint16) + prior).astype(numpy.uint8)
        elif kind == 1:
            # Sub: a running sum along each channel.
            pixels = line.reshape(width, channels).astype(numpy.uint64)
            recon = (numpy.cumsum(pixels, axis=0) % 256).astype(numpy.uint8).reshape(stride)
        else:
            out = bytearray(stride)
            up = prior.tobytes()
            filtered = line.tobytes()
            for i in range(stride):
                a = out[i - channels] if i >= channels else 0
                b = up[i]
                if kind == 3:
                    value = filtered[i] + ((a + b) >> 1)
                else:
                    c = up[i - channels] if i >= channels else 0
                    value = filtered[i] + _paeth(a, b, c)
                out[i] = value & 0xFF
            recon = numpy.frombuffer(bytes(out), dtype=numpy.uint8)
        image[row] = recon
        prior = recon
    return image.reshape(height, width, channels)


def ink_box(image, threshold=24):
    """(left, top, right, bottom) of the pixels drawn (alpha above threshold), or None;
    right and bottom are exclusive."""
    alpha = image[:, :, 3] if image.shape[2] == 4 else 255 - image.min(axis=2)
    rows = numpy.nonzero((alpha > threshold).any(axis=1))[0]
    columns = numpy.nonzero((alpha > threshold).any(axis=0))[0]
    if len(rows) == 0:
        return None
    return (int(columns[0]), int(rows[0]), int(columns[-1]) + 1, int(rows[-1]) + 1)


def _texts(root):
    return [element for element in root.iter(f"{{{SVG_NS}}}text")]


def text_boxes(svg_path, workdir):
    """[(text content, (left, top, right, bottom) in canvas pixels)] for every <text>, each
    rendered alone on a canvas widened by MARGIN on every side."""
    ElementTree.register_namespace("", SVG_NS)
    tree = ElementTree.parse(svg_path)
    root = tree.getroot()
    width, height = float(root.get("width")), float(root.get("height"))
    root.set("width", str(width + 2 * MARGIN))
    root.set("height", str(height + 2 * MARGIN))
    root.set("viewBox", f"{-MARGIN} {-MARGIN} {width + 2 * MARGIN} {height + 2 * MARGIN}")
    everything = list(root.iter())
    texts = _texts(root)
    boxes = []
    for index, text in enumerate(texts):
        for element in everything:
            element.set("visibility", "hidden")
        text.set("visibility", "visible")
        for child in text.iter():
            child.set("visibility", "visible")
        path = os.path.join(workdir, f"text{index}.svg")
        tree.write(path, encoding="utf-8", xml_declaration=True)
        render_png(path, path + ".png")
        box = ink_box(read_png(path + ".png"))
        content = "".join(text.itertext())
        if box is not None:
            box = (box[0] - MARGIN, box[1] - MARGIN, box[2] - MARGIN, box[3] - MARGIN)
        boxes.append((content, box))
    return (width, height), boxes


def layout_faults(svg_path, workdir=None):
    """What is wrong with the picture's text: [str], empty when every text lies inside the
    canvas and no two overlap."""
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="svg-picture-")
    os.makedirs(workdir, exist_ok=True)
    try:
        (width, height), boxes = text_boxes(svg_path, workdir)
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    faults = []
    drawn = [(content, box) for content, box in boxes if box is not None]
    for content, (left, top, right, bottom) in drawn:
        if left < 0 or top < 0 or right > width or bottom > height:
            faults.append(f"{content!r} at {left},{top}..{right},{bottom} leaves the "
                          f"{width:g} × {height:g} canvas")
    for i, (first, a) in enumerate(drawn):
        for second, b in drawn[i + 1:]:
            if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]:
                faults.append(f"{first!r} {a} overlaps {second!r} {b}")
    return faults, boxes


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    svg_path = sys.argv[1]
    if len(sys.argv) == 3:
        render_png(svg_path, sys.argv[2])
    faults, boxes = layout_faults(svg_path)
    for content, box in boxes:
        print(f"{box}  {content}")
    for fault in faults:
        print(f"FAULT: {fault}")
    sys.exit(1 if faults else 0)


if __name__ == "__main__":
    main()
