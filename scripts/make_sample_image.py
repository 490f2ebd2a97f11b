#!/usr/bin/env python3
"""Draws assets/sample.png, the project's own sample image (512x512): a small
landscape with a house, a tree, the sun and a sign reading "QHexRT". Pillow
only; deterministic. Run: .venv/bin/python scripts/make_sample_image.py"""

from pathlib import Path

from PIL import Image, ImageDraw

W = H = 512
img = Image.new("RGB", (W, H))
d = ImageDraw.Draw(img)
for y in range(H):  # sky to horizon
    t = y / H
    d.line([(0, y), (W, y)], fill=(int(90 + 120 * t), int(150 + 80 * t), int(235 - 40 * t)))
d.rectangle([0, 340, W, H], fill=(70, 150, 60))                      # grass
d.ellipse([400, 40, 470, 110], fill=(255, 215, 60))                  # sun
d.rectangle([120, 230, 300, 360], fill=(200, 80, 60))                # house
d.polygon([(105, 235), (210, 150), (315, 235)], fill=(120, 50, 40))  # roof
d.rectangle([190, 290, 230, 360], fill=(90, 60, 40))                 # door
d.rectangle([140, 255, 175, 285], fill=(180, 220, 250))              # window
d.rectangle([245, 255, 280, 285], fill=(180, 220, 250))
d.rectangle([380, 250, 395, 360], fill=(110, 70, 40))                # tree
d.ellipse([340, 170, 435, 270], fill=(40, 120, 50))
d.rectangle([20, 380, 150, 430], fill=(240, 240, 230), outline=(60, 60, 60), width=3)  # sign
d.text((38, 395), "QHexRT", fill=(20, 20, 20))
out = Path(__file__).resolve().parents[1] / "assets" / "sample.png"
img.save(out, optimize=True)
print(out, out.stat().st_size, "bytes")
