"""Write tests/data/tokenizers/: how Hugging Face transformers' Python BERT tokenizer
(BertTokenizerLegacy in transformers 5, the slow BertTokenizer of transformers 4) tokenises
sentences from a checkpoint's vocab.txt and the files beside it, when there is no
tokenizer.json, so that the tests check xsent's vocab.txt reader against the reference.

Run once with a Python that has transformers (the benchmarks' venv, scripts/lib/torch-venv.sh),
from the repository root, after scripts/setup.sh:

    ~/.cache/xsent/bench-venv/bin/python scripts/make-wordpiece-fixtures.py models/all-MiniLM-L6-v2/vocab.txt ../shared/data tests/data/tokenizers

Each variant is a folder of tokenizer files beside MiniLM's vocab.txt (which the tests copy in,
with CRLF line ends for `crlf`); wordpiece-expected.json holds, per variant, the ids of the same
sentences: the first 3 lines of each Tatoeba language file and edge cases.
"""
import json
import pathlib
import shutil
import sys
import tempfile

from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

vocab, data, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
n_vocab = len(vocab.read_text(encoding="utf-8").splitlines())
variants = {
    "cased": {"tokenizer_config.json": {"do_lower_case": False, "tokenizer_class": "BertTokenizer"}},
    "accents-kept": {"tokenizer_config.json": {"do_lower_case": True, "strip_accents": False, "tokenize_chinese_chars": False}},
    # transformers 4's files: special_tokens_map.json overrides the config's cls_token,
    # additional special tokens, and added_tokens.json.
    "specials-v4": {
        "tokenizer_config.json": {"do_lower_case": True, "cls_token": "[CLS]", "additional_special_tokens": ["[unused1]"]},
        "special_tokens_map.json": {"cls_token": "[unused2]", "sep_token": "[SEP]", "unk_token": "[UNK]", "pad_token": "[PAD]", "mask_token": "[MASK]"},
        "added_tokens.json": {"<ent>": n_vocab, "<rel>": n_vocab + 1},
    },
    # transformers 5's name for them.
    "specials-v5": {"tokenizer_config.json": {"do_lower_case": False, "extra_special_tokens": ["[unused5]"]}},
    "crlf": {"tokenizer_config.json": {"do_lower_case": True}},
}
sentences = []
for f in sorted((data / "tatoeba").glob("tatoeba.*-eng.*")):
    if f.suffix != ".eng":
        sentences += f.read_text(encoding="utf-8").splitlines()[:3]
sentences += [
    "",
    "Hello [CLS] world [SEP] and [MASK] [PAD] [UNK] tokens",
    "[unused1] [unused2] [unused5] <ent>x<rel> y",
    "a" * 101 + " short",
    "Tabs\tand\u0000control\u0007chars\u00ad here",
    "Café ÜNÏCÖDÉ façade naïve — “quotes” ½ ﬁ",
    "混合English和中文text",
    "don't stop-believing, e.g. U.S.A. 3.14 $100",
]
expected = {}
for name, files in variants.items():
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        text = vocab.read_text(encoding="utf-8")
        (tmp / "vocab.txt").write_text(text.replace("\n", "\r\n") if name == "crlf" else text, encoding="utf-8", newline="")
        d = out / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        for f, content in files.items():
            for target in (tmp / f, d / f):
                target.write_text(json.dumps(content, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        tok = BertTokenizerLegacy.from_pretrained(str(tmp))
        expected[name] = [{"text": s, "ids": tok(s)["input_ids"]} for s in sentences]
        print(name, len(tok), "tokens;", tok.cls_token, tok.all_special_tokens[:8])
(out / "wordpiece-expected.json").write_text(
    json.dumps({"vocab": "all-MiniLM-L6-v2 vocab.txt", "tokenizer": "transformers 5 BertTokenizerLegacy.from_pretrained", "variants": expected}, ensure_ascii=False)
)
