"""Verse alignment, misaligned-chapter detection, chapter splits and the TSV files of
``scratchformer data bible``, on fixtures shaped like the real SWORD markup (no Debian
package needed); the real preparation runs in a slow test when the packages are present."""

import importlib.util
import json
from pathlib import Path

import pytest

from scratchformer.app.data import bible as bib
from scratchformer.app.data.bible import BibleDataError, Verse, chapter_split, clean_osis
from scratchformer.app.data.bible_pairs import (
    SHOWN_PROBLEMS,
    ParallelDataError,
    align_texts,
    chapter_aligned,
    ensure_modules,
    read_pairs,
    write_pairs,
)

# real markup of the RV1909 (Gen 1:1, 1:2, 2:1) and the WEB (Gen 1:1)
SPA_GEN_1_1 = (
    '<w lemma="strong:H7225">EN el principio</w> <w lemma="strong:H1254">crió</w> '
    '<w lemma="strong:H0430">Dios</w> <w lemma="strong:H8064">los cielos</w> '
    '<w lemma="strong:H0776">y la tierra</w>. '
)
SPA_GEN_2_1 = (
    '<w lemma="strong:H3615">Y FUERON</w> <w lemma="strong:H8064">acabados los cielos</w> '
    '<w lemma="strong:H0776">y la tierra</w>, <w lemma="strong:H3605">y todo</w> '
    '<w lemma="strong:H6635">su ornamento</w>. '
)
WEB_GEN_1_1 = (
    '<w lemma="strong:H0430">In</w> <w lemma="strong:H0853">the</w> '
    '<w lemma="strong:H7225">beginning</w>, <w lemma="strong:H0430">God</w>'
    '<note placement="foot"><reference type="annotateRef">1:1 </reference>The Hebrew word '
    "rendered “God” is “אֱלֹהִ֑ים” (Elohim).</note>"
    '<w lemma="strong:H1254">created</w> <w lemma="strong:H0853">the</w> '
    '<w lemma="strong:H8064">heavens</w> <w lemma="strong:H0430">and</w> '
    '<w lemma="strong:H0853">the</w> <w lemma="strong:H0776">earth</w>. '
)


def test_fixture_markup_is_cleaned_like_the_real_text():
    assert clean_osis(SPA_GEN_1_1, chapter_start=True) == (
        "En el principio crió Dios los cielos y la tierra."
    )
    assert clean_osis(SPA_GEN_2_1, chapter_start=True).startswith("Y fueron acabados")
    assert clean_osis(WEB_GEN_1_1, chapter_start=True) == (
        "In the beginning, God created the heavens and the earth."
    )


def _chapter(book, ch, lengths, word="palabra"):
    return [Verse(book, ch, i + 1, " ".join([word] * n)) for i, n in enumerate(lengths)]


LENGTHS = [5, 20, 8, 30, 12, 3, 25, 9]


def test_aligned_chapters_are_kept_and_paired_by_reference():
    src = _chapter("Gen", 1, LENGTHS) + _chapter("Gen", 2, [4, 6])
    tgt = _chapter("Gen", 1, [n + 1 for n in LENGTHS], "word") + _chapter("Gen", 2, [5, 7], "w")
    s, t, rep = align_texts(src, tgt)
    assert rep.kept == rep.chapters == 2 and not rep.dropped_numbering and not rep.dropped_shift
    assert [v.ref for v in s] == [v.ref for v in t] == [v.ref for v in src]


def test_a_chapter_with_different_verse_numbers_is_dropped():
    """Jonah 1: 16 verses in the RV1909, 17 in the WEB (the RV1909 puts 1:17 at 2:1)."""
    src = _chapter("Jonah", 1, LENGTHS[:-1]) + _chapter("Jonah", 3, LENGTHS)
    tgt = _chapter("Jonah", 1, LENGTHS, "w") + _chapter("Jonah", 3, LENGTHS, "w")
    s, _, rep = align_texts(src, tgt)
    assert rep.dropped_numbering == ["Jonah 1"]
    assert {v.chapter for v in s} == {3}


def test_a_chapter_shifted_by_one_verse_is_dropped():
    """Num 13: same verse count, but the RV1909's verse n is the WEB's n+1."""
    shifted = LENGTHS[1:] + [7]
    assert (
        chapter_aligned(
            {i + 1: "x " * n for i, n in enumerate(shifted)},
            {i + 1: "y " * n for i, n in enumerate(LENGTHS)},
        )
        == "shift"
    )
    src, tgt = _chapter("Num", 13, shifted), _chapter("Num", 13, LENGTHS, "w")
    s, _, rep = align_texts(src, tgt)
    assert rep.dropped_shift == ["Num 13"] and s == []


def test_split_is_by_chapter_and_files_round_trip(tmp_path):
    src, tgt = [], []
    for ch in range(1, 41):
        src += _chapter("Ps", ch, [3, 4], "alabad")
        tgt += _chapter("Ps", ch, [3, 4], "praise")
    counts = write_pairs(tmp_path, src, tgt, dev=0.2, test=0.2)
    assert sum(counts.values()) == 80 and all(counts[s] > 0 for s in counts)
    for split in ("train", "dev", "test"):
        lines = (tmp_path / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
        refs = [line.split("\t")[2] for line in lines]
        chapters = {r.split(":")[0] for r in refs}
        for c in chapters:  # both verses of each chapter land in the same split
            assert f"{c}:1" in refs and f"{c}:2" in refs
            book, ch = c.split()
            assert chapter_split(book, int(ch), 0.2, 0.2) == split
        assert len(read_pairs(tmp_path / f"{split}.tsv")) == counts[split]


def test_an_interrupted_preparation_keeps_the_previous_files(tmp_path):
    """The splits are written all or nothing: a failure half-way (here a verse whose
    text raises) leaves the earlier complete files untouched and no temporary files."""
    src, tgt = [], []
    for ch in range(1, 21):
        src += _chapter("Ps", ch, [3, 4], "alabad")
        tgt += _chapter("Ps", ch, [3, 4], "praise")
    write_pairs(tmp_path, src, tgt, dev=0.2, test=0.2)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    class Broken:
        book, chapter, ref = "Ps", 1, "Ps 1:9"

        @property
        def text(self):
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        write_pairs(tmp_path, src[:5] + [Broken()], tgt[:6], dev=0.2, test=0.2)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize(
    "content, message",
    [
        ("hola\tmundo\nsolo una columna\n", r"bad\.tsv:2: expected source<TAB>target"),
        ("hola\tmundo\n\n", r"bad\.tsv:2: empty line"),
        ("hola\t \n", r"bad\.tsv:1: empty target"),
        ("", r"no sentence pairs \(empty split\)"),
        ("a\tb\tc\td\n", r"bad\.tsv:1: expected .* found 4"),
    ],
)
def test_malformed_tsv_gives_clear_errors(tmp_path, content, message):
    p = tmp_path / "bad.tsv"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(ParallelDataError, match=message):
        read_pairs(p)


def test_missing_tsv_names_the_command(tmp_path):
    with pytest.raises(ParallelDataError, match="scratchformer data bible"):
        read_pairs(tmp_path / "test.tsv")


def test_every_problem_of_a_pairs_file_is_named_at_once(tmp_path):
    """Three bad lines among good ones: one error naming each, with its line; past
    SHOWN_PROBLEMS, the count and the first ones."""
    p = tmp_path / "bad.tsv"
    p.write_text("a\tb\n\nno tab\nc\td\n\t e\nf\tg\n", encoding="utf-8")
    with pytest.raises(ParallelDataError) as e:
        read_pairs(p)
    assert str(e.value).splitlines() == [
        f"{p}: 3 lines are not source<TAB>target pairs:",
        f"  {p}:2: empty line (expected source<TAB>target)",
        f"  {p}:3: expected source<TAB>target[<TAB>ref], found 1 tab-separated field: 'no tab'",
        f"  {p}:5: empty source",
    ]
    p.write_text("x\n" * (SHOWN_PROBLEMS + 5), encoding="utf-8")
    with pytest.raises(ParallelDataError) as e:
        read_pairs(p)
    lines = str(e.value).splitlines()
    assert lines[0] == f"{p}: {SHOWN_PROBLEMS + 5} lines are not source<TAB>target pairs " + (
        f"(the first {SHOWN_PROBLEMS} below):"
    )
    assert len(lines) == 1 + SHOWN_PROBLEMS and lines[-1].startswith(f"  {p}:{SHOWN_PROBLEMS}:")


def test_data_pairs_skips_and_counts_blank_lines(tmp_path, capsys):
    from scratchformer.app.cli import main  # noqa: PLC0415

    mine = tmp_path / "mine.tsv"
    pairs = [f"fuente {i}\ttarget {i}" for i in range(60)]
    mine.write_text("\n" + "\n".join(pairs[:30]) + "\n  \n" + "\n".join(pairs[30:]) + "\n\n")
    assert main(["data", "pairs", str(mine), "--data-dir", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "skipped 3 blank lines" in out and "total" not in out
    written = [read_pairs(tmp_path / "d" / "mine" / f"{s}.tsv") for s in ("train", "dev", "test")]
    assert sum(map(len, written)) == 60


def test_data_pairs_of_a_missing_file_says_it_is_yours_that_is_missing(tmp_path, capsys):
    from scratchformer.app.cli import main  # noqa: PLC0415

    assert main(["data", "pairs", str(tmp_path / "nonexist.tsv")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'nonexist.tsv'} not found: data pairs splits a file of yours" in err
    assert "bible" not in err


def test_missing_modules_give_the_commands_to_run(tmp_path, monkeypatch):
    if importlib.util.find_spec("pysword") is None:
        pytest.skip("pysword is not installed")
    monkeypatch.setattr("scratchformer.app.data.bible_pairs.USER_SWORD", tmp_path / "none")
    with pytest.raises(BibleDataError, match=r"apt-get install -y sword-text-sparv"):
        ensure_modules(["spaRV1909eb"], tmp_path, install=False)


def _packages_present() -> bool:
    mods = Path(bib.sword_path(), "mods.d")
    return importlib.util.find_spec("pysword") is not None and all(
        (mods / f"{m}.conf").exists() for m in ("spaRV1909eb", "engWEB2015eb", "engKJV2006eb")
    )


@pytest.mark.slow
@pytest.mark.skipif(not _packages_present(), reason="SWORD packages or pysword not installed")
def test_real_preparation_of_the_bible_pairs(tmp_path, capsys):
    """The whole RV1909 -> WEB: ~30k aligned pairs, the chapters known to shift dropped,
    every line a clean source<TAB>target<TAB>ref; and KJV -> WEB."""
    from scratchformer.app.cli import main  # noqa: PLC0415

    assert main(["data", "bible", "--data-dir", str(tmp_path), "-v", "--no-install"]) == 0
    out = capsys.readouterr().out
    for ch in ("Num 13", "Jonah 1", "Jonah 2", "1Sam 24", "Hos 12", "Job 39", "Job 40"):
        assert ch in out
    n = 0
    for split in ("train", "dev", "test"):
        pairs = read_pairs(tmp_path / "bible" / f"{split}.tsv")
        n += len(pairs)
        for s, t in pairs:
            assert "<" not in s + t and "  " not in s + t
    assert 28_000 < n < 31_500
    assert main(["data", "bible", "--pair", "kjv-web", "--data-dir", str(tmp_path)]) == 0
    assert (tmp_path / "bible-kjv-web" / "test.tsv").stat().st_size > 0


def _fake_system(monkeypatch, tmp_path, root: bool):
    """apt-get/dpkg-deb stand-ins that 'install' a module's .conf file, and a log."""
    calls = []
    monkeypatch.setattr("scratchformer.app.data.bible_pairs.shutil.which", lambda name: name)
    monkeypatch.setattr("scratchformer.app.data.bible_pairs.os.geteuid",
                        lambda: 0 if root else 1000)
    monkeypatch.setattr("scratchformer.app.data.bible_pairs.USER_SWORD", tmp_path / "user")
    monkeypatch.setenv("SWORD_PATH", str(tmp_path / "sys"))
    monkeypatch.setattr("scratchformer.app.data.bible_pairs._import_pysword", lambda: None)

    class Done:
        returncode = 0

    def run(cmd, cwd=None, **kw):
        calls.append(cmd[:2])
        if cmd[1] == "install":
            (tmp_path / "sys" / "mods.d").mkdir(parents=True)
            (tmp_path / "sys" / "mods.d" / "spaRV1909eb.conf").write_text("x")
        elif cmd[1] == "download":
            (Path(cwd) / "sword-text-sparv_1.0_all.deb").write_text("deb")
        elif cmd[0] == "dpkg-deb":
            mods = Path(cmd[3]) / "usr" / "share" / "sword" / "mods.d"
            mods.mkdir(parents=True)
            (mods / "spaRV1909eb.conf").write_text("x")
        return Done()

    return run, calls


def test_installs_the_packages_as_root(monkeypatch, tmp_path):
    run, calls = _fake_system(monkeypatch, tmp_path, root=True)
    assert ensure_modules(["spaRV1909eb"], run=run) == tmp_path / "sys"
    assert calls == [["apt-get", "install"]]


def test_unpacks_the_packages_without_root(monkeypatch, tmp_path):
    run, calls = _fake_system(monkeypatch, tmp_path, root=False)
    where = ensure_modules(["spaRV1909eb"], run=run)
    assert where == tmp_path / "user" / "usr" / "share" / "sword"
    assert calls == [["apt-get", "download"], ["dpkg-deb", "-x"]]
    assert ensure_modules(["spaRV1909eb"], run=None) == where  # found there next time


def test_text_after_the_end_of_a_book_is_not_part_of_the_verse():
    """The WEB module appends its glossary to Rev 22:21, after the book's end milestone."""
    rev_22_21 = (
        "The grace of the Lord Jesus Christ be with all the saints. Amen.  "
        '<chapter eID="Rev.22"/><div eID="gen35836" type="x-p"/> <div canonical="true" '
        'eID="gen35575" osisID="Rev" type="book"/> <div sID="gen35837" type="glossary"/> '
        '<title level="1" type="main">World English Bible Glossary</title> The following '
        "words used in the World English Bible (WEB) are not very common ..."
    )
    assert clean_osis(rev_22_21) == (
        "The grace of the Lord Jesus Christ be with all the saints. Amen."
    )


def test_a_verse_pair_with_one_side_three_times_longer_is_dropped():
    """Ps 18:1: the RV1909 counts the psalm's title as verse 1, the WEB does not."""
    src = _chapter("Ps", 18, [40] + LENGTHS)
    tgt = _chapter("Ps", 18, [5] + LENGTHS, "words")
    s, t, rep = align_texts(src, tgt)
    assert rep.dropped_verses == ["Ps 18:1"] and rep.kept == 1
    assert [v.verse for v in s] == [v.verse for v in t] == list(range(2, 10))


def test_data_pairs_writes_a_manifest_last_that_every_reader_checks(tmp_path, capsys):
    """The splits' names, sizes and SHA-256, and the command that rebuilds them; a set
    whose files do not match it (an interrupted overwrite, an edit) is refused in one line
    naming that command, by train (and every reader) before anything is read."""
    from scratchformer.app.cli import main  # noqa: PLC0415
    from scratchformer.app.data.pairs import translation_pairs  # noqa: PLC0415
    from scratchformer.app.data.text import CorpusError  # noqa: PLC0415

    mine, out = tmp_path / "mine.tsv", tmp_path / "d"
    mine.write_text("".join(f"fuente {i}\ttarget {i}\n" for i in range(60)))
    assert main(["data", "pairs", str(mine), "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["files"]) == ["dev.tsv", "test.tsv", "train.tsv"]
    assert manifest["command"] == f"scratchformer data pairs {mine} --out {out} --overwrite"
    manifest["complete"] = False  # as a run killed among its renames leaves it
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorpusError) as e:
        translation_pairs(out, vocab_size=300, max_len=50)
    assert str(e.value) == (
        f"{out} is not a whole data set: a run writing it was interrupted: it is incomplete; "
        f"rebuild it with `scratchformer data pairs {mine} --out {out} --overwrite`"
    )
    capsys.readouterr()
    argv = ["train", "--config", "pairs", "--set", f"task.data_dir={out}", "--run-dir"]
    assert main([*argv, str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a whole data set" in err[0], err
    assert not (tmp_path / "run").exists()
    assert main(["data", "pairs", str(mine), "--out", str(out)]) == 0  # no --overwrite needed
    capsys.readouterr()
    (out / "dev.tsv").write_text((out / "dev.tsv").read_text().replace("fuente", "source"))
    with pytest.raises(
        CorpusError, match=f"dev.tsv holds other content than it had .*delete {out}"
    ):
        translation_pairs(out, vocab_size=300, max_len=50)


def test_data_goes_into_no_folder_of_a_run_or_of_another_kind_of_data_set(tmp_path, capsys):
    from scratchformer.app.cli import main  # noqa: PLC0415

    mine = tmp_path / "mine.tsv"
    mine.write_text("".join(f"fuente {i}\ttarget {i}\n" for i in range(60)))
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n')
    text = tmp_path / "web"
    text.mkdir()
    for s in ("train", "dev", "test"):
        (text / f"{s}.txt").write_text("In the beginning\n")
    for out, what in ((run, "the folder of a run"), (text, "the folder of a data set")):
        before = sorted(p.name for p in out.iterdir())
        assert main(["data", "pairs", str(mine), "--out", str(out), "--overwrite"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--out {out} is {what}: a data set would be" in err[0], err
        assert sorted(p.name for p in out.iterdir()) == before
