"""The before/after table of docs/benchmarks.md from the runs' JSON files in this folder.

    python table.py bible     # or small
"""

import json
import sys
from pathlib import Path

here = Path(__file__).parent
model = sys.argv[1]
before = json.loads((here / f"{model}_before_d087ec8.json").read_text())
after = json.loads((here / f"{model}_after.json").read_text())
print("| row | before: ours sent/s (ours/CT2) | after: ours sent/s | after/before | "
      "CTranslate2 sent/s | ours/CT2 (spread) | ours/CT2 int8 | `generate` sent/s | "
      "ours/`generate` | agree CT2, `generate` (after) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for b, a in zip(before["rows"], after["rows"]):
    assert b["row"] == a["row"]
    s = a["sent_per_s"]
    lo, hi = a["ours/ct2_spread"]
    n = a["sentences"]
    print(f"| {a['row']} | {b['sent_per_s']['ours']:.2f} ({b['ours/ct2']:.2f}x) | "
          f"{s['ours']:.2f} | "
          f"{s['ours'] / b['sent_per_s']['ours']:.2f}x | {s['ct2']:.2f} | "
          f"**{a['ours/ct2']:.2f}x** ({lo:.2f}-{hi:.2f}) | {a['ours/ct2-int8']:.2f}x | "
          f"{s['generate']:.2f} | {a['ours/generate']:.2f}x | "
          f"{a['agree_ct2']}/{n}, {a['agree_generate']}/{n} |")
