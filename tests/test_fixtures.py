from transformers import AutoModelForSequenceClassification, AutoTokenizer


def test_tiny_tokenizer_keeps_hangul_syllables(tiny_tokenizer_dir):
    tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    tokens = tok.tokenize("꿈에서 봤다")
    assert "[UNK]" not in tokens
    assert all(len(t.lstrip("#")) >= 1 and not ("\u1100" <= t[-1] <= "\u11ff") for t in tokens)  # no jamo


def test_tiny_classifier_has_label_names(tiny_classifier_dir):
    model = AutoModelForSequenceClassification.from_pretrained(tiny_classifier_dir)
    assert model.config.id2label[0] == "dream"
