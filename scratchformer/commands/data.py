"""``scratchformer data``: prepare the real data sets of the variant models, offline.

    scratchformer data genre        Bible verse -> genre (law, history, wisdom, prophets,
                                    gospels, epistles; Revelation counted as prophecy):
                                    data/genre.{train,dev,test}.tsv  (label<TAB>verse<TAB>ref)
    scratchformer data web-text     World English Bible verses, one per line, for the
                                    character-level language model: data/web.{train,dev,test}.txt

Both read the World English Bible from the Debian package ``sword-text-web`` with the
``pysword`` reader and split by chapter (a hash of "Book.chapter"), so that no chapter
has verses on both sides. Install once:

    sudo apt-get install -y sword-text-web       (or apt-get download + dpkg-deb -x, and
    pip install -e '.[data]'                      --sword-path DIR/usr/share/sword)
"""

from __future__ import annotations

import argparse
import time


def add_parser(sub) -> None:
    p = sub.add_parser(
        "data",
        help="prepare the real data sets (Bible genre classification, WEB text for the LM)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dataset", choices=["genre", "web-text"], help="what to prepare")
    p.add_argument("--data-dir", default="data", help="output directory (default: data/)")
    p.add_argument(
        "--sword-path",
        default=None,
        help="SWORD directory holding mods.d/ (default: $SWORD_PATH or /usr/share/sword)",
    )
    p.add_argument("--module", default="engWEB2015eb", help="SWORD module (default: the WEB)")
    p.add_argument("--dev", type=float, default=0.05, help="share of chapters for dev (0.05)")
    p.add_argument("--test", type=float, default=0.05, help="share of chapters for test (0.05)")
    p.set_defaults(func=run)


def run(args) -> int:
    from scratchformer.data.bible import (  # noqa: PLC0415
        GENRES,
        iter_verses,
        open_bible,
        prepare_genre,
        prepare_text,
    )

    if not (0 <= args.dev < 1 and 0 <= args.test < 1 and args.dev + args.test < 1):
        raise ValueError(f"--dev {args.dev} and --test {args.test} must leave some training data")
    t0 = time.perf_counter()
    bible = open_bible(args.module, args.sword_path)
    verses = iter_verses(bible)
    if args.dataset == "genre":
        counts = prepare_genre(args.data_dir, verses, args.dev, args.test)
        width = max(len(g) for g in GENRES)
        print(f"{'genre':<{width}}  {'train':>6} {'dev':>6} {'test':>6}")
        for g in GENRES:
            print(f"{g:<{width}}  " + " ".join(f"{counts[s][g]:>6}" for s in counts))
        totals = {s: sum(c.values()) for s, c in counts.items()}
        print(f"{'total':<{width}}  " + " ".join(f"{totals[s]:>6}" for s in totals))
        files = "genre.{train,dev,test}.tsv"
    else:
        counts = prepare_text(args.data_dir, verses, "web", args.dev, args.test)
        for s, (lines, chars) in counts.items():
            print(f"{s:<5}  {lines:>6} verses  {chars:>9} characters")
        files = "web.{train,dev,test}.txt"
    print(f"wrote {args.data_dir}/{files} in {time.perf_counter() - t0:.1f} s")
    return 0
