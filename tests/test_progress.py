"""Long stages are never silent: the ticker prints while the work is stuck on one slow
piece, the bar redraws itself, and both stop when closed."""

import io
import time

from scratchformer.progress import Ticker, clock, progress_bar


def test_the_ticker_prints_while_a_slow_piece_runs():
    lines = []
    t = Ticker(10, "decoding", lines.append, every=0.05)
    time.sleep(0.3)  # one slow batch: no update() meanwhile
    t.update(4)
    time.sleep(0.12)
    t.close()
    n = len(lines)
    time.sleep(0.12)
    assert len(lines) == n >= 4  # stopped with close()
    assert lines[0] == "  decoding: 0/10 (0:00:00)" and lines[-1].startswith("  decoding: 4/10")


def test_the_bar_redraws_while_nothing_finishes():
    out = io.StringIO()
    bar = progress_bar(3, "decoding", "sentence", file=out)
    bar._repeat.stop()  # restart its redraw faster, for the test
    from scratchformer.progress import _Repeater  # noqa: PLC0415

    bar._repeat = _Repeater(bar.refresh, 0.05)
    time.sleep(0.3)
    drawn = out.getvalue().count("decoding")
    bar.close()
    assert drawn >= 4


def test_clock():
    assert clock(0) == "0:00:00" and clock(3725.9) == "1:02:05"
