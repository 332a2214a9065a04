"""How many verses each book of the SWORD modules we read holds, as ``iter_verses`` reads
them from intact modules (verses empty after cleaning left out): a module that gives other
counts is damaged (a truncated or bit-flipped file silently loses verses: pysword reads
them as empty) and is refused, naming the book.

Counted from the Debian packages sword-text-web 426.0-1, sword-text-sparv 2.60-1 and
sword-text-kjv 14.3-1, book by book in the order of ``bible.CANON``.
"""

#: module -> verses per book, in canon order
VERSE_COUNTS: dict[str, tuple[int, ...]] = {
    "engWEB2015eb": (
        1533, 1213, 859, 1288, 959, 658, 618, 85, 810, 695, 816, 719, 942, 822, 280, 406, 167,
        1070, 2461, 915, 222, 117, 1292, 1364, 154, 1273, 357, 197, 73, 146, 21, 48, 105, 47,
        56, 53, 38, 211, 55, 404, 1071, 678, 1150, 879, 1004, 430, 437, 257, 149, 155, 104, 95,
        89, 47, 113, 83, 46, 25, 303, 108, 105, 61, 105, 13, 14, 25,
    ),
    "spaRV1909eb": (
        1533, 1213, 859, 1286, 959, 658, 618, 85, 809, 694, 816, 719, 942, 821, 280, 406, 167,
        1061, 2461, 915, 222, 117, 1292, 1364, 154, 1273, 357, 196, 73, 146, 21, 47, 105, 47,
        56, 53, 38, 211, 55, 404, 1071, 678, 1151, 879, 1006, 433, 437, 256, 149, 155, 104, 95,
        89, 47, 113, 83, 46, 25, 303, 108, 105, 61, 105, 13, 14, 25,
    ),
    "engKJV2006eb": (
        1533, 1213, 859, 1288, 959, 658, 618, 85, 810, 695, 816, 719, 942, 822, 280, 406, 167,
        1070, 2461, 915, 222, 117, 1292, 1364, 154, 1273, 357, 197, 73, 146, 21, 48, 105, 47,
        56, 53, 38, 211, 55, 404, 1071, 678, 1151, 879, 1007, 433, 437, 257, 149, 155, 104, 95,
        89, 47, 113, 83, 46, 25, 303, 108, 105, 61, 105, 13, 14, 25,
    ),
}

#: an unknown module: each book must hold at least this share of the verses its
#: versification numbers (the known modules hold 93% or more of every book)
MIN_SHARE = 0.9

__all__ = ["MIN_SHARE", "VERSE_COUNTS"]
