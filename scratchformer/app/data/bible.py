"""Bible texts from SWORD modules, cleaned of OSIS markup: real data that works offline.

    bible = open_bible("engWEB2015eb")             # World English Bible (sword-text-web)
    for v in iter_verses(bible):                     # Verse(book="Gen", chapter=1, verse=1,
        ...                                          #       text="In the beginning, God ...")

The modules come from Debian packages (``sword-text-web``, ``sword-text-sparv``,
``sword-text-kjv``; installed under /usr/share/sword) and are read with the pure-Python
``pysword`` reader (``pip install -e '.[data]'``). All three texts are public domain.

Cleaning (``clean_osis``), as the translation task and the variant models need it:

- footnotes and cross-references (``<note>...</note>``, with their ``<reference>``),
  headings (``<title>``, Song of Solomon's ``<speaker>``) are dropped with their content;
- Strong's tags (``<w lemma=...>``), ``<transChange>``, ``<divineName>``, ``<q>``,
  ``<seg>``, ... keep their words and lose the tag; milestones (``<div/>``, ``<l/>``,
  ``<lg/>``, ``<chapter/>``) and the KJV's paragraph sign disappear;
- the RV1909 writes an added word (``<transChange>``) straight against the next word
  (``díjo<transChange>le</transChange><w>Dios``): a space goes after it; the glue
  before it is left (it is often an enclitic, ``díjo`` + ``le``);
- a removed note often glued two words (``God<note>..</note><w>created``): a space is
  put back where the note sat between a word (or punctuation) and the next word;
- chapters of the RV1909 open with capitals (``EN el principio``, ``Y FUERON``):
  ``normalise_chapter_caps`` turns the leading run into ``En el principio``,
  ``Y fueron``, leaving the KJV's divine name (``LORD``) alone.

pysword re-inflates the whole compressed block (one book) for every verse it reads;
``open_bible`` memoises that, which takes reading a module from minutes to < 1 s.

Splits are by chapter (``chapter_split``: a CRC-32 hash of "Book.chapter"), never by
verse: parallel passages (Kings/Chronicles, the synoptic gospels) share whole chapters'
wording, and a verse split would leak them between train and test.
"""

from __future__ import annotations

import html
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from scratchformer.app import writer
from scratchformer.app.data.verse_counts import MIN_SHARE, VERSE_COUNTS
from scratchformer.engine.errors import ScratchformerError

#: Module names of the Debian packages (package -> module).
MODULES = {
    "web": "engWEB2015eb",  # sword-text-web: World English Bible
    "kjv": "engKJV2006eb",  # sword-text-kjv: King James Version
    "sparv": "spaRV1909eb",  # sword-text-sparv: Reina-Valera 1909
}
PACKAGES = {v: f"sword-text-{k}" for k, v in MODULES.items()}
DEFAULT_SWORD_PATH = "/usr/share/sword"

#: The 66 books of the Protestant canon (OSIS names), in order. The WEB module also
#: holds the deuterocanon, which we leave out (the other modules lack it).
GENRES: dict[str, tuple[str, ...]] = {
    "law": ("Gen", "Exod", "Lev", "Num", "Deut"),
    "history": (
        "Josh",
        "Judg",
        "Ruth",
        "1Sam",
        "2Sam",
        "1Kgs",
        "2Kgs",
        "1Chr",
        "2Chr",
        "Ezra",
        "Neh",
        "Esth",
    ),
    "wisdom": ("Job", "Ps", "Prov", "Eccl", "Song"),
    "prophets": (
        "Isa",
        "Jer",
        "Lam",
        "Ezek",
        "Dan",
        "Hos",
        "Joel",
        "Amos",
        "Obad",
        "Jonah",
        "Mic",
        "Nah",
        "Hab",
        "Zeph",
        "Hag",
        "Zech",
        "Mal",
        "Rev",
    ),  # Revelation merged into the prophets
    "gospels": ("Matt", "Mark", "Luke", "John", "Acts"),  # gospels + Acts
    "epistles": (
        "Rom",
        "1Cor",
        "2Cor",
        "Gal",
        "Eph",
        "Phil",
        "Col",
        "1Thess",
        "2Thess",
        "1Tim",
        "2Tim",
        "Titus",
        "Phlm",
        "Heb",
        "Jas",
        "1Pet",
        "2Pet",
        "1John",
        "2John",
        "3John",
        "Jude",
    ),
}
GENRE_OF = {book: genre for genre, books in GENRES.items() for book in books}
CANON = tuple(b for books in GENRES.values() for b in books)


class BibleDataError(ScratchformerError):
    """pysword or a SWORD module is missing, or a text cannot be read."""


@dataclass(frozen=True)
class Verse:
    book: str  # OSIS name, e.g. "Gen", "1Sam", "Rev"
    chapter: int
    verse: int
    text: str  # cleaned plain text

    @property
    def ref(self) -> str:
        return f"{self.book} {self.chapter}:{self.verse}"


# -- OSIS cleaning ------------------------------------------------------------------------
_DROP_WITH_CONTENT = re.compile(
    r"<(note|title|speaker)\b[^>]*?(?<!/)>.*?</\1\s*>", re.DOTALL
)  # footnotes, cross-references, headings (non-greedy: these never nest in themselves)
_SELF_CLOSING_DROPPED = re.compile(r"<(note|title|speaker)\b[^>]*/>")
_TAG = re.compile(r"<[^>]+>")
_BOOK_END = re.compile(r'<div\b(?=[^>]*\btype="book")(?=[^>]*\beID=)[^>]*/>')
_GLUE = "\x00"  # where a dropped note sat: becomes a space only between two words
_DIVINE = "\x01"  # marks the start of a divine name while cleaning
_CAPS_WORD = re.compile(r"^[^\w]*([^\W\d_]+)([^\w]*)$")


def _restore_glue(text: str) -> str:
    """Each glue mark becomes a space when it sits between a non-space character and
    the start of a word (letter, digit, opening quote or bracket), else nothing."""

    def repl(m):
        s, e = m.start(), m.end()
        left = text[s - 1] if s > 0 else " "
        right = text[e] if e < len(text) else " "
        if left.isspace() or right.isspace():
            return ""
        if right.isalnum() or right in "“‘(«¿¡\"'":
            return " "
        return ""

    return re.sub(_GLUE + "+", repl, text)


def normalise_chapter_caps(text: str) -> str:
    """The leading run of all-capital words of a chapter's first verse, as a sentence
    would write it: ``"EN el principio"`` -> ``"En el principio"``, ``"Y FUERON
    acabados"`` -> ``"Y fueron acabados"``. Words after the run are untouched."""
    words = text.split(" ")
    out, first = [], True
    for i, w in enumerate(words):
        m = _CAPS_WORD.match(w)
        letters = m.group(1) if m and _DIVINE not in w else ""
        if not letters or letters != letters.upper() or (len(letters) < 2 and i > 0):
            out.extend(words[i:])
            break
        low = w.lower()
        if first:
            j = low.index(letters.lower()[0])
            low = low[:j] + low[j].upper() + low[j + 1 :]
            first = False
        out.append(low)
        if len(letters) == 1 and i == 0:  # "Y FUERON": a one-letter first word, go on
            continue
    return " ".join(out)


def clean_osis(markup: str, chapter_start: bool = False) -> str:
    """OSIS markup of one verse  ->  plain text (see the module docstring).

    ``chapter_start``: the verse opens a chapter; its leading capitals are normalised
    (the divine name, which the KJV writes ``LORD``, is left as it is).
    """
    end = _BOOK_END.search(markup)
    if end:  # the end of a book: what follows (the WEB's glossary after Rev 22:21) is no verse
        markup = markup[: end.start()]
    text = _DROP_WITH_CONTENT.sub(_GLUE, markup)
    # the RV1909 glues an added word to the next tagged word ("le</transChange><w>Dios")
    text = re.sub(r"</transChange>(?=<w\b)", "</transChange>" + _GLUE, text)
    text = _SELF_CLOSING_DROPPED.sub("", text)
    # protect the divine name (the KJV's LORD) from the capitals rule
    text = re.sub(r"<divineName\b[^>]*>", _DIVINE, text)
    text = _TAG.sub("", text)
    text = html.unescape(text).replace("¶", " ")
    text = _restore_glue(text)
    text = re.sub(r"\s+", " ", text).strip()
    if chapter_start:
        text = normalise_chapter_caps(text)
    return text.replace(_DIVINE, "")


# -- reading SWORD modules ----------------------------------------------------------------
def _import_pysword():
    try:
        from pysword.modules import SwordModules  # noqa: PLC0415  (optional: the data extra)
    except ImportError:
        raise BibleDataError(
            "reading the Bible texts needs the pysword reader: pip install -e '.[data]' "
            "(or pip install 'pysword>=0.2')"
        ) from None
    return SwordModules


def sword_path(path=None) -> Path:
    """The SWORD directory: ``path``, else $SWORD_PATH, else /usr/share/sword."""
    return Path(path or os.environ.get("SWORD_PATH") or DEFAULT_SWORD_PATH)


def _missing_module(module: str, where: Path) -> BibleDataError:
    pkg = PACKAGES.get(module, "sword-text-<name>")
    return BibleDataError(
        f"SWORD module {module} not found under {where}: install it with "
        f"`sudo apt-get install -y {pkg}` (Debian/Ubuntu), or without root "
        f"`apt-get download {pkg} && dpkg-deb -x {pkg}_*.deb ~/sword` and pass "
        f"--sword-path ~/sword/usr/share/sword (or set SWORD_PATH)"
    )


def open_bible(module: str = "engWEB2015eb", path=None):
    """A pysword bible for ``module`` with its block decompression memoised."""
    SwordModules = _import_pysword()
    where = sword_path(path)
    if not (where / "mods.d").is_dir():
        raise _missing_module(module, where)
    mods = SwordModules(str(where))
    try:
        found = mods.parse_modules()
    except Exception as e:  # pysword raises bare exceptions on odd directories
        raise BibleDataError(f"cannot read SWORD modules under {where}: {e}") from None
    if module not in found:
        raise _missing_module(module, where)
    bible = mods.get_bible_from_module(module)
    _memoise_blocks(bible)
    bible.scratchformer_source = (module, where)  # what iter_verses checks it against
    return bible


def _memoise_blocks(bible) -> None:
    """pysword's zText reader inflates a whole block (a book) to read one verse; keep
    the last few inflated blocks (reading in canon order needs one at a time)."""
    inflate = getattr(bible, "_decompressed_text", None)
    if inflate is None:  # a raw (uncompressed) module: nothing to memoise
        return
    blocks: dict = {}

    def cached(testament, buf_num):
        key = (testament, buf_num)
        if key not in blocks:
            if len(blocks) >= 8:
                blocks.pop(next(iter(blocks)))
            blocks[key] = inflate(testament, buf_num)
        return blocks[key]

    bible._decompressed_text = cached


def iter_verses(bible, books: Iterable[str] | None = None) -> Iterator[Verse]:
    """Every verse of ``books`` (OSIS names; default the 66-book canon), cleaned, in
    canon order. Verses empty after cleaning (omitted in this translation) are skipped.

    A damaged module (a truncated or bit-flipped file) reads as empty verses, silently:
    so each book's verses are counted as it ends, against the counts of the intact
    module (``verse_counts.VERSE_COUNTS``; for another module, at least ``MIN_SHARE``
    of the verses its versification numbers), and a book that falls short is an error
    naming it (``BibleDataError``): no data set is made from it. (A bible not opened by
    ``open_bible`` is read unchecked.)"""
    wanted = CANON if books is None else tuple(books)
    module, where = getattr(bible, "scratchformer_source", (None, None))
    counts = VERSE_COUNTS.get(module)
    structure = {}
    for book_list in bible.get_structure().get_books().values():
        for b in book_list:
            structure[b.osis_name] = b
    for osis in wanted:
        if osis not in structure:
            raise BibleDataError(f"book {osis!r} is not in this module")
        b = structure[osis]
        read = 0
        for ch, n_verses in enumerate(b.chapter_lengths, start=1):
            for v in range(1, n_verses + 1):
                try:
                    raw = bible.get(books=[b.name], chapters=[ch], verses=[v], clean=False)
                except Exception as e:  # pysword's errors of a damaged file vary
                    raise _damaged(module, where, f"{osis} {ch}:{v} cannot be read ({e})") from None
                text = clean_osis(raw, chapter_start=(v == 1))
                if text:
                    read += 1
                    yield Verse(osis, ch, v, text)
        numbered = sum(b.chapter_lengths)
        want = counts[CANON.index(osis)] if counts and osis in CANON else None
        short = read != want if want is not None else read < MIN_SHARE * numbered
        if module is not None and short:  # a bible ``open_bible`` opened
            holds = (
                f"the intact module holds {want}"
                if want is not None
                else (f"its versification numbers {numbered}")
            )
            raise _damaged(module, where, f"{osis} gives {read} verses, where {holds}")


def _damaged(module, where, what: str) -> BibleDataError:
    """The error of a module that reads wrong: what went wrong, and how to reinstall it."""
    pkg = PACKAGES.get(module, "its package")
    return BibleDataError(
        f"SWORD module {module or ''} under {where or 'its folder'} is damaged: {what}; "
        f"reinstall it (sudo apt-get install --reinstall {pkg}) and prepare the data again"
    )


# -- splits and prepared files ------------------------------------------------------------
def chapter_split(book: str, chapter: int, dev: float = 0.05, test: float = 0.05) -> str:
    """The split of a whole chapter, "train", "dev" or "test", by a CRC-32 hash of "Book.chapter"
    (the same on every machine and for every module)."""
    u = (zlib.crc32(f"{book}.{chapter}".encode()) & 0xFFFFFFFF) / 2**32
    if u < test:
        return "test"
    if u < test + dev:
        return "dev"
    return "train"


def _one_line(text: str) -> str:
    return text.replace("\t", " ").replace("\n", " ")


class Written(dict):
    """``{split: count}`` of a data set written, and whether its files were there already
    with this very content (``unchanged``: nothing was replaced)."""

    unchanged: bool = False


def split_files(
    out_dir, names: dict, overwrite: bool = False, inputs=(), command: str = ""
) -> writer.FileSet:
    """``{split: file name}`` under ``out_dir``, written all or nothing (``writer.FileSet``)
    with the data set's manifest written last (``manifest.json``: the files' names, sizes
    and SHA-256, and ``command``, the command that rebuilds the set), which every reader
    checks: an interrupted preparation never leaves a set that reads as whole. Files
    already there with other content (hand edits) are replaced only with ``overwrite``;
    identical ones are left alone; an input of the command (``inputs``, ``[(what,
    path)]``) is never written, nor a link out of ``out_dir``."""
    out = Path(out_dir)
    paths = {s: out / name for s, name in names.items()}
    fs = writer.FileSet(
        paths,
        owner=out,
        overwrite=overwrite,
        inputs=inputs,
        manifest=writer.MANIFEST_NAME,
        command=command,
    )
    out.mkdir(parents=True, exist_ok=True)
    return fs


def prepare_genre(
    out_dir, verses: Iterable[Verse], dev=0.05, test=0.05, overwrite=False, command=""
) -> dict:
    """Write ``{train,dev,test}.tsv`` (``label<TAB>text<TAB>ref``) under ``out_dir``;
    returns ``{split: {genre: count}}`` (a ``Written``). ``command``: the one that rebuilds
    the set, for its manifest."""
    counts = Written({s: {g: 0 for g in GENRES} for s in ("train", "dev", "test")})
    fs = split_files(out_dir, {s: f"{s}.tsv" for s in counts}, overwrite, command=command)
    with fs as files:
        for v in verses:
            genre = GENRE_OF.get(v.book)
            if genre is None:
                continue
            s = chapter_split(v.book, v.chapter, dev, test)
            files[s].write(f"{genre}\t{_one_line(v.text)}\t{v.ref}\n")
            counts[s][genre] += 1
    counts.unchanged = fs.unchanged
    return counts


def prepare_text(
    out_dir, verses: Iterable[Verse], dev=0.05, test=0.05, overwrite=False, command=""
) -> dict:
    """Write ``{train,dev,test}.txt`` under ``out_dir``, one verse per line, split by
    chapter; returns ``{split: (lines, characters)}`` (a ``Written``). ``command``: the one
    that rebuilds the set, for its manifest."""
    counts = {s: [0, 0] for s in ("train", "dev", "test")}
    fs = split_files(out_dir, {s: f"{s}.txt" for s in counts}, overwrite, command=command)
    with fs as files:
        for v in verses:
            s = chapter_split(v.book, v.chapter, dev, test)
            line = _one_line(v.text)
            files[s].write(line + "\n")
            counts[s][0] += 1
            counts[s][1] += len(line)
    out = Written({s: tuple(c) for s, c in counts.items()})
    out.unchanged = fs.unchanged
    return out


__all__ = [
    "CANON",
    "GENRES",
    "GENRE_OF",
    "MODULES",
    "BibleDataError",
    "Verse",
    "chapter_split",
    "clean_osis",
    "iter_verses",
    "normalise_chapter_caps",
    "open_bible",
    "prepare_genre",
    "prepare_text",
]
