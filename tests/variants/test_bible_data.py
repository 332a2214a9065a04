"""Bible data preparation: OSIS cleaning, chapter splits, the prepared files, and the
errors that name the install commands. The fixture is shaped like the real SWORD
markup (Strong's tags, footnotes glued between words, cross-references, psalm titles,
milestones, the RV1909's capitals and transChange); no Debian package is needed. The
real preparation runs in a slow test when the packages are installed."""

import importlib.util
from pathlib import Path

import pytest

from scratchformer.app.data import bible as bib
from scratchformer.app.data.bible import (
    BibleDataError,
    Verse,
    chapter_split,
    clean_osis,
    iter_verses,
    normalise_chapter_caps,
    prepare_genre,
    prepare_text,
)
from scratchformer.app.data.text import CorpusError, load_labelled, load_lines

# -- real markup, copied from the modules -------------------------------------------------------
WEB_GEN_1_1 = (
    '<w lemma="strong:H0430">In</w> <w lemma="strong:H0853">the</w> '
    '<w lemma="strong:H7225">beginning</w>, <w lemma="strong:H0430">God</w>'
    '<note placement="foot"><reference type="annotateRef">1:1 </reference>The Hebrew word '
    "rendered “God” is “אֱלֹהִ֑ים” (Elohim).</note>"
    '<w lemma="strong:H1254">created</w> <w lemma="strong:H0853">the</w> '
    '<w lemma="strong:H8064">heavens</w> <w lemma="strong:H0430">and</w> '
    '<w lemma="strong:H0853">the</w> <w lemma="strong:H0776">earth</w>. '
)
WEB_JUDE_1_1 = (
    '<w lemma="strong:G2455">Jude</w>,<note placement="foot"><reference type="annotateRef">'
    '1:1 </reference>or, Judah</note><w lemma="strong:G2532">a</w> '
    '<w lemma="strong:G1401">servant</w>'
)
WEB_MATT_5_3 = (
    '<div type="x-milestone" subType="x-preverse" sID="pv13808"/><lg sID="gen30354"/> '
    '<l level="1" sID="gen30355"/> <div type="x-milestone" subType="x-preverse" eID="pv13808"/> '
    '<q marker="" who="Jesus">“<w lemma="strong:G3107">Blessed</w> <w lemma="strong:G1510">are'
    '</w> <w lemma="strong:G3588">the</w> <w lemma="strong:G4434">poor</w> <w lemma="strong:'
    'G4434">in</w> <w lemma="strong:G4151">spirit</w>,</q> <l eID="gen30355" level="1"/> '
    '<l level="2" sID="gen30357"/> <q marker="" who="Jesus"><w lemma="strong:G3754">for</w> '
    '<w lemma="strong:G0846">theirs</w> <w lemma="strong:G1510">is</w> <w lemma="strong:G3588">'
    'the</w> <w lemma="strong:G0932">Kingdom</w> <w lemma="strong:G0932">of</w> '
    '<w lemma="strong:G3772">Heaven</w>.</q> <note type="crossReference"> <reference '
    'subType="x-origin" type="annotateRef">5:3 </reference> <reference>Isaiah 57:15; 66:2'
    '</reference> </note>  <l eID="gen30357" level="2"/>'
)
WEB_PS_3_1 = (
    '<div type="x-milestone" subType="x-preverse" sID="pv4877"/><title canonical="true" '
    'type="psalm">A Psalm by David, when he fled from Absalom his son.</title> <lg sID="gen7860"/>'
    ' <l level="1" sID="gen7861"/><div type="x-milestone" subType="x-preverse" eID="pv4877"/>'
    'Yahweh, how <w lemma="strong:H1732">my</w> adversaries <w lemma="strong:H1121">have</w> '
    'increased!<l eID="gen7861" level="1"/>'
)
SONG_1_2 = (
    '<div type="x-milestone" subType="x-preverse" sID="pv8242"/><speaker>Beloved</speaker> '
    '<lg sID="gen15617"/> <l level="1" sID="gen15618"/>Let <w lemma="strong:H3588">him</w> kiss'
)
RV_GEN_1_1 = (
    '<w lemma="strong:H7225">EN el principio</w> <w lemma="strong:H1254">crió</w> '
    '<w lemma="strong:H0430">Dios</w> <w lemma="strong:H8064">los cielos</w> '
    '<w lemma="strong:H0776">y la tierra</w>. '
)
RV_GEN_2_1 = '<w lemma="strong:H3615">Y FUERON</w> <w lemma="strong:H8064">acabados los cielos</w>'
RV_1KGS_3_5 = (
    '<w lemma="strong:H0559">y díjo</w><transChange type="added">le</transChange>'
    '<w lemma="strong:H0430">Dios</w>: <w lemma="strong:H7592">Pide</w>'
)
KJV_PS_6_1 = 'O <divineName><w lemma="strong:H3068">LORD</w></divineName>, rebuke me not'
KJV_GEN_2_4 = (
    '<div sID="gen13" type="x-p"/> ¶ <w lemma="strong:H0428">These</w> '
    '<transChange type="added">are</transChange> the'
)


@pytest.mark.parametrize(
    "markup, chapter_start, expected",
    [
        (WEB_GEN_1_1, True, "In the beginning, God created the heavens and the earth."),
        (WEB_JUDE_1_1, True, "Jude, a servant"),
        (
            WEB_MATT_5_3,
            False,
            "“Blessed are the poor in spirit, for theirs is the Kingdom of Heaven.",
        ),
        (WEB_PS_3_1, True, "Yahweh, how my adversaries have increased!"),
        (SONG_1_2, False, "Let him kiss"),
        (RV_GEN_1_1, True, "En el principio crió Dios los cielos y la tierra."),
        (RV_GEN_2_1, True, "Y fueron acabados los cielos"),
        (RV_1KGS_3_5, False, "y díjole Dios: Pide"),
        (KJV_PS_6_1, True, "O LORD, rebuke me not"),
        (KJV_GEN_2_4, False, "These are the"),
    ],
    ids=[
        "note-glued-words",
        "note-after-comma",
        "quotes-crossref-milestones",
        "psalm-title",
        "speaker-heading",
        "rv-chapter-caps",
        "rv-caps-after-one-letter",
        "rv-transchange-glue",
        "kjv-divine-name-kept",
        "kjv-pilcrow",
    ],
)
def test_clean_osis(markup, chapter_start, expected):
    assert clean_osis(markup, chapter_start) == expected


def test_capitals_are_normalised_only_at_a_chapter_start():
    assert clean_osis(RV_GEN_2_1, chapter_start=False) == "Y FUERON acabados los cielos"
    assert normalise_chapter_caps("UN varón de la familia") == "Un varón de la familia"
    assert normalise_chapter_caps("In the beginning") == "In the beginning"
    assert normalise_chapter_caps("“ESTOS son") == "“Estos son"


def test_chapter_split_is_by_chapter_and_stable():
    """Every verse of a chapter lands in one split; the shares are roughly as asked."""
    splits = [chapter_split(b, c) for b in bib.CANON for c in range(1, 30)]
    share = {s: splits.count(s) / len(splits) for s in ("train", "dev", "test")}
    assert 0.02 < share["test"] < 0.09 and 0.02 < share["dev"] < 0.09
    assert chapter_split("Gen", 1) == chapter_split("Gen", 1)
    assert chapter_split("Gen", 1, dev=0.0, test=1.0) == "test"


def test_genres_cover_the_canon_with_revelation_in_the_prophets():
    assert len(bib.CANON) == 66 and len(set(bib.CANON)) == 66
    assert bib.GENRE_OF["Rev"] == "prophets"
    assert bib.GENRE_OF["Acts"] == "gospels" and bib.GENRE_OF["Jude"] == "epistles"
    assert sorted(bib.GENRES) == ["epistles", "gospels", "history", "law", "prophets", "wisdom"]


class _Book:
    def __init__(self, name, osis, chapter_lengths):
        self.name, self.osis_name, self.chapter_lengths = name, osis, chapter_lengths


class _Structure:
    def __init__(self, books):
        self.books = books

    def get_books(self):
        return {"ot": [b for b in self.books if b.osis_name != "Matt"],
                "nt": [b for b in self.books if b.osis_name == "Matt"]}


class FakeBible:
    """pysword's interface: ``get_structure().get_books()`` and ``get(..., clean=False)``;
    a zText-like ``_decompressed_text`` that counts how often a block is inflated."""

    def __init__(self):
        self.books = [_Book("Genesis", "Gen", [2, 1]), _Book("Matthew", "Matt", [1])]
        self.text = {
            ("Genesis", 1, 1): WEB_GEN_1_1,
            ("Genesis", 1, 2): "<w>The</w> earth <note>n</note>",
            ("Genesis", 2, 1): "",  # a verse this translation omits
            ("Matthew", 1, 1): WEB_MATT_5_3,
        }
        self.inflations = 0

    def get_structure(self):
        return _Structure(self.books)

    def _decompressed_text(self, testament, buf_num):
        self.inflations += 1
        return b"block"

    def get(self, books, chapters, verses, clean=True):
        self._decompressed_text("ot", 0)  # pysword inflates the book's block per verse
        return self.text[(books[0], chapters[0], verses[0])]


def test_iter_verses_reads_cleans_and_skips_empty_verses():
    vs = list(iter_verses(FakeBible(), ["Gen", "Matt"]))
    assert [v.ref for v in vs] == ["Gen 1:1", "Gen 1:2", "Matt 1:1"]
    assert vs[1].text == "The earth"
    with pytest.raises(BibleDataError, match="book 'Rev'"):
        list(iter_verses(FakeBible(), ["Rev"]))


def test_an_opened_module_we_hold_no_counts_for_must_hold_most_of_each_book():
    """Each book at least MIN_SHARE of the verses its versification numbers (the counts
    of the modules we know are checked exactly: tests/faults/test_special_inputs.py)."""
    bible = FakeBible()  # Genesis numbers 3 verses and gives 2
    bible.scratchformer_source = ("myBible", Path("/somewhere"))
    with pytest.raises(BibleDataError, match="Gen gives 2 verses, where its versification"):
        list(iter_verses(bible, ["Gen"]))
    assert [v.ref for v in iter_verses(bible, ["Matt"])] == ["Matt 1:1"]  # 1 of 1


def test_block_decompression_is_memoised():
    b = FakeBible()
    bib._memoise_blocks(b)
    list(iter_verses(b, ["Gen", "Matt"]))
    assert b.inflations == 1  # not once per verse


def test_prepared_files(tmp_path):
    verses = [
        Verse("Gen", 1, 1, "In the beginning"),
        Verse("Rev", 3, 2, "Be\twatchful"),
        Verse("Matt", 5, 3, "Blessed"),
    ]
    counts = prepare_genre(tmp_path / "genre", verses)
    rows = []
    for s in ("train", "dev", "test"):
        rows += (tmp_path / "genre" / f"{s}.tsv").read_text(encoding="utf-8").splitlines()
    assert sorted(rows) == sorted(
        [
            "law\tIn the beginning\tGen 1:1",
            "prophets\tBe watchful\tRev 3:2",
            "gospels\tBlessed\tMatt 5:3",
        ]
    )
    assert sum(sum(c.values()) for c in counts.values()) == 3
    text_counts = prepare_text(tmp_path / "web-text", verses)
    assert sum(n for n, _ in text_counts.values()) == 3
    lines = []
    for s in ("train", "dev", "test"):
        lines += (tmp_path / "web-text" / f"{s}.txt").read_text(encoding="utf-8").splitlines()
    assert sorted(lines) == ["Be watchful", "Blessed", "In the beginning"]


def test_the_loaders_read_a_folder_of_splits_and_the_former_layout(tmp_path):
    """data/web-text/{split}.txt and data/genre/{split}.tsv; the former names
    (web.{split}.txt, genre.{split}.tsv in one folder) are still read, the folder's own
    names first where both are there."""
    new, former = tmp_path / "new", tmp_path / "former"
    new.mkdir()
    former.mkdir()
    for s in ("train", "dev", "test"):
        (new / f"{s}.txt").write_text(f"{s} verse\n", encoding="utf-8")
        (new / f"{s}.tsv").write_text(f"law\t{s} verse\n", encoding="utf-8")
        (former / f"web.{s}.txt").write_text(f"old {s}\n", encoding="utf-8")
        (former / f"genre.{s}.tsv").write_text(f"law\told {s}\n", encoding="utf-8")
    assert load_lines(new) == {s: [f"{s} verse"] for s in ("train", "dev", "test")}
    assert load_labelled(new)["dev"] == [("law", "dev verse")]
    assert load_lines(former)["test"] == ["old test"]
    assert load_labelled(former)["train"] == [("law", "old train")]
    (new / "web.train.txt").write_text("old\n", encoding="utf-8")
    assert load_lines(new)["train"] == ["train verse"]
    with pytest.raises(CorpusError, match=r"scratchformer data web-text"):
        load_lines(tmp_path)


def test_missing_module_names_the_install_commands(tmp_path):
    if importlib.util.find_spec("pysword") is None:
        pytest.skip("pysword is not installed (the error for that is tested below)")
    with pytest.raises(BibleDataError, match=r"apt-get install -y sword-text-web"):
        bib.open_bible("engWEB2015eb", tmp_path)


def test_missing_pysword_names_the_install_command(monkeypatch):
    import builtins  # noqa: PLC0415

    real_import = builtins.__import__

    def no_pysword(name, *args, **kwargs):
        if name.startswith("pysword"):
            raise ImportError("No module named 'pysword'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pysword)
    with pytest.raises(BibleDataError, match=r"pip install -e '\.\[data\]'"):
        bib.open_bible()


def _web_installed() -> bool:
    return (
        importlib.util.find_spec("pysword") is not None
        and Path(bib.sword_path(), "mods.d", "engWEB2015eb.conf").exists()
    )


@pytest.mark.slow
@pytest.mark.skipif(not _web_installed(), reason="sword-text-web or pysword not installed")
def test_real_preparation_of_the_web(tmp_path):
    """The whole WEB: ~31k verses, clean text, every genre in every split."""
    from scratchformer.app.cli import main  # noqa: PLC0415

    assert main(["data", "genre", "--data-dir", str(tmp_path)]) == 0
    assert main(["data", "web-text", "--data-dir", str(tmp_path)]) == 0
    n = 0
    labels = set()
    for s in ("train", "dev", "test"):
        for line in (tmp_path / "genre" / f"{s}.tsv").read_text(encoding="utf-8").splitlines():
            label, text, ref = line.split("\t")
            assert "<" not in text and ">" not in text and "  " not in text, ref
            labels.add(label)
            n += 1
    assert 30000 < n < 31200
    assert labels == set(bib.GENRES)
    text = (tmp_path / "web-text" / "train.txt").read_text(encoding="utf-8")
    assert text.startswith("In the beginning, God created the heavens and the earth.\n")
