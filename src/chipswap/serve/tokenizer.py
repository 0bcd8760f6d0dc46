"""Text <-> token ids for `chipswap serve` (``{"text": ...}`` requests) and for prompts of exact token
lengths in `chipswap bench`.

A tokenizer is a Hugging Face ``tokenizers`` JSON file (data, parsed by the Rust library; nothing in it runs).
chipswap ships one small one for the bundled example (``example``: a 1,000-token lowercase WordPiece
vocabulary, ids 0-4 = [PAD] [UNK] [CLS] [SEP] [MASK], so it fits tiny-distilbert's vocabulary of 1,000 and pad
id 0). It was built here by ``build_wordpiece`` from chipswap's own README and docs (no hub download);
rebuild it with ``python -m chipswap.serve.tokenizer OUT.json FILE...``.

May not: download anything, or write anywhere but the path it is given.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from chipswap.datafile import read_text
from chipswap.errors import ChipswapError

EXAMPLE = "example"
EXAMPLE_FILE = "example-wordpiece-1k.json"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_TOKENIZER_BYTES = 32 * 1024 * 1024


def example_tokenizer_path() -> Path:
    return Path(str(resources.files("chipswap.data").joinpath("tokenizers", EXAMPLE_FILE)))


@dataclass
class TextTokenizer:
    """A loaded tokenizer: ``encode(text)`` with the model's special tokens, ``decode(ids)``."""

    impl: Any  # tokenizers.Tokenizer
    source: str

    @property
    def vocab_size(self) -> int:
        return int(self.impl.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, *, special: bool = True) -> list[int]:
        return list(self.impl.encode(text, add_special_tokens=special).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.impl.decode(list(ids), skip_special_tokens=True))

    def token_id(self, token: str) -> int | None:
        got = self.impl.token_to_id(token)
        return None if got is None else int(got)

    def plain_ids(self) -> list[int]:
        """Ids of ordinary whole-word tokens (no specials, no ## pieces): what prompt builders sample."""
        vocab = self.impl.get_vocab(with_added_tokens=False)
        return sorted(i for t, i in vocab.items() if t.isalpha() and t not in SPECIAL_TOKENS)


def load_tokenizer(spec: str | Path) -> TextTokenizer:
    """``example`` (the shipped one) or the path of a tokenizers JSON file (tokenizer.json)."""
    from tokenizers import Tokenizer

    path = example_tokenizer_path() if str(spec) == EXAMPLE else Path(spec)
    text = read_text(path, "tokenizer file", max_bytes=MAX_TOKENIZER_BYTES)
    try:
        impl = Tokenizer.from_str(text)
    except Exception as exc:  # the Rust parser raises its own exception type
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ChipswapError(
            f"tokenizer file {path} is not a tokenizers JSON file ({first});"
            " pass a tokenizer.json or 'example'"
        ) from None
    return TextTokenizer(impl, str(path))


def build_wordpiece(texts: Iterable[str], vocab_size: int = 1000) -> Any:
    """A lowercase BERT-style WordPiece tokenizer trained on ``texts`` ([CLS] text [SEP] on encode)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    tok.no_padding()
    return tok


def main(argv: list[str]) -> int:  # pragma: no cover - a maintainer's tool
    if len(argv) < 2:
        sys.stderr.write("usage: python -m chipswap.serve.tokenizer OUT.json TEXTFILE...\n")
        return 2
    from chipswap.atomic import atomic_write_text

    texts = [Path(p).read_text(encoding="utf-8") for p in argv[1:]]
    tok = build_wordpiece(texts)
    atomic_write_text(argv[0], tok.to_str(pretty=False))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
