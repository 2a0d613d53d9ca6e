"""Write tests/data/tokenizers/wordpiece-cased.json: how Hugging Face transformers tokenises
sentences with a BERT WordPiece vocabulary (vocab.txt) when a checkpoint has no tokenizer.json,
with lowercasing off, so that the tests check xsent's vocab.txt tokenizer against the
reference library.

Run once with a Python that has transformers (the benchmarks' venv, scripts/lib/torch-venv.sh),
from the repository root, after scripts/setup.sh:

    ~/.cache/xsent/bench-venv/bin/python scripts/make-wordpiece-fixtures.py models/all-MiniLM-L6-v2/vocab.txt ../shared/data tests/data/tokenizers

The sentences: the first 8 lines of each Tatoeba language file (every script and accent there),
plus edge cases (special tokens inside text, a word over 100 characters, control characters,
Chinese characters, accents, an empty line). Both transformers' slow BertTokenizer and the
fast one it converts are run; they must agree, and the file holds their ids.
"""
import json
import pathlib
import sys

from transformers import BertTokenizer, BertTokenizerFast

vocab, data, out = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
sentences = []
for f in sorted((data / "tatoeba").glob("tatoeba.*-eng.*")):
    if f.suffix == ".eng":
        continue
    sentences += f.read_text(encoding="utf-8").splitlines()[:8]
sentences += [
    "",
    "Hello [CLS] world [SEP] and [MASK] tokens",
    "a" * 101 + " short",
    "Tabs\tand\u0000control\u0007chars\u00ad here",
    "Café Ünïcödé façade naïve — “quotes” ½ ﬁ",
    "混合English和中文text",
    "don't stop-believing, e.g. U.S.A. 3.14 $100",
]
cased = dict(do_lower_case=False)
slow = BertTokenizer(vocab, **cased)
fast = BertTokenizerFast(vocab, **cased)
rows = []
for s in sentences:
    a, b = slow(s)["input_ids"], fast(s)["input_ids"]
    assert a == b, (s, a, b)
    rows.append({"text": s, "ids": b})
out.mkdir(parents=True, exist_ok=True)
(out / "wordpiece-cased.json").write_text(
    json.dumps({"vocab": "all-MiniLM-L6-v2 vocab.txt", "tokenizer": "transformers BertTokenizer(Fast), do_lower_case=False", "rows": rows}, ensure_ascii=False)
)
print(len(rows), "sentences")
