"""The tokenizer shipped for the bundled example, and tokenizer files from users."""

from __future__ import annotations

import pytest

from chipswap.errors import ChipswapError
from chipswap.serve.tokenizer import SPECIAL_TOKENS, build_wordpiece, example_tokenizer_path, load_tokenizer


def test_shipped_example_fits_tiny_distilbert():
    from chipswap.models import load_preset

    tok = load_tokenizer("example")
    cfg = load_preset("tiny-distilbert")["config"]
    assert tok.vocab_size == cfg["vocab_size"] == 1000
    assert [tok.token_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert tok.token_id("[PAD]") == cfg["pad_token_id"]
    assert example_tokenizer_path().stat().st_size < 64 * 1024  # small enough to ship
    ids = tok.encode("Compile the model once per bucket")
    assert ids[0] == 2 and ids[-1] == 3 and all(0 <= i < 1000 for i in ids)
    assert tok.decode(ids) == "compile the model once per bucket"
    unknown = tok.encode("Ωmega", special=False)
    assert 1 in unknown  # characters it never saw map to [UNK], not to an error


def test_plain_ids_are_whole_words_for_prompts():
    tok = load_tokenizer("example")
    plain = tok.plain_ids()
    assert len(plain) > 300 and not set(plain) & {0, 1, 2, 3, 4}
    for i in plain[:50]:
        assert tok.encode(tok.decode([i]), special=False) == [i]


def test_build_wordpiece_makes_a_bounded_bert_style_tokenizer():
    # (training order is not reproducible id for id: the shipped file, not a rebuild, is the artifact)
    texts = ["serve the compiled buckets with dynamic batching"] * 20 + ["padding waste per bucket"] * 5
    a = build_wordpiece(texts, vocab_size=120)
    assert a.get_vocab_size() <= 120
    assert [a.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    enc = a.encode("Serve the buckets")
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]" and "serve" in enc.tokens


def test_bad_tokenizer_files_are_one_line(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text('{"version": "1.0", "model": 5}')
    with pytest.raises(ChipswapError, match="not a tokenizers JSON file") as ei:
        load_tokenizer(bad)
    assert "\n" not in str(ei.value)
    with pytest.raises(ChipswapError, match="cannot read tokenizer file"):
        load_tokenizer(tmp_path / "missing.json")
    with pytest.raises(ChipswapError, match="is a folder"):
        load_tokenizer(tmp_path)
